"""The house's shape (docs/architecture.md, "The map" and "Classes you can hold in your
head"): the top level of ``dethpc/`` is the twelve layered packages and nothing else,
and no class grows past ~300 lines or ~20 methods unless the architecture page says why.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "dethpc"
ARCHITECTURE = REPO / "docs" / "architecture.md"

#: the layered packages of docs/architecture.md, bottom first
PACKAGES = ("common", "config", "searchers", "backends", "store", "jobs", "control", "core",
            "launch", "pytorch", "surfaces", "devcluster")
MAX_LINES = 300
MAX_METHODS = 20


def big_classes(root: Path) -> dict[str, tuple[int, int]]:
    """``module:Class`` -> (lines, methods) of every class over either limit."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            methods = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef)
                          for b in node.body)
            if lines > MAX_LINES or methods > MAX_METHODS:
                found[f"{path.relative_to(root.parent).as_posix()}:{node.name}"] = (lines, methods)
    return found


def excused() -> set[str]:
    """Classes the architecture page names, each with its reason, under "Classes you can
    hold in your head" (a line starting ``- `path.py:Class` ``)."""
    text = ARCHITECTURE.read_text()
    section = text.split("## Classes you can hold in your head", 1)[-1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `([\w/.]+\.py:\w+)`", section, re.M))


def test_the_top_level_is_the_layered_packages() -> None:
    entries = {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"}
    assert entries == {"__init__.py", *PACKAGES}
    for name in PACKAGES:
        assert (PACKAGE / name / "__init__.py").is_file(), f"{name} is not a package"


def test_no_class_is_too_big_to_hold_in_your_head() -> None:
    too_big = {name: size for name, size in big_classes(PACKAGE).items()
               if name not in excused()}
    assert too_big == {}, (f"classes over {MAX_LINES} lines or {MAX_METHODS} methods "
                           "(split them, or say why in docs/architecture.md): "
                           f"{too_big}")


def test_the_size_rule_finds_a_big_class(tmp_path: Path) -> None:
    body = "\n".join(f"    def m{i}(self) -> None:\n        pass" for i in range(21))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "big.py").write_text(f"class Big:\n{body}\n\nclass Small:\n    pass\n")
    assert big_classes(tmp_path / "pkg") == {"pkg/big.py:Big": (43, 21)}


#: Slurm's commands that submit, watch, act on jobs or read a site's settings
SLURM_COMMANDS = ("sbatch", "squeue", "scancel", "scontrol", "sacct", "sacctmgr", "sinfo",
                  "sdiag")
#: where an argv may name one: the backends (they talk to Slurm), the dev cluster (it
#: runs Slurm), and the job side, which asks about its own job from inside it (issue 46)
SLURM_ALLOWED = {
    "backends": "dethpc talks to Slurm through its backends",
    "devcluster": "the dev cluster starts and checks Slurm itself",
    "launch": "the job side: a run asks scontrol about its own job and requeues it",
    "common/detached.py": "the job side: a detached job registers itself from inside",
    "common/hostlist.py": "the job side: the launchers expand their own node list",
}
def _argv_lines(tree: ast.AST) -> list[int]:
    """Lines of list displays whose first item is a Slurm command's name: an argv.
    A display compared with (``args[:1] == ["sbatch"]``: a CLI word) is not one, nor a
    subscript (``record["sbatch"]``): read from the syntax, not the text."""
    compared = {id(c) for node in ast.walk(tree) if isinstance(node, ast.Compare)
                for c in (node.left, *node.comparators)}
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.List) and node.elts
            and isinstance(node.elts[0], ast.Constant) and node.elts[0].value in SLURM_COMMANDS
            and id(node) not in compared]


def slurm_calls(root: Path) -> list[str]:
    """``file:line`` of every argv list that starts with a Slurm command outside the
    allowed places."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if any(rel == a or rel.startswith(a + "/") for a in SLURM_ALLOWED):
            continue
        out += [f"{rel}:{n}" for n in sorted(_argv_lines(ast.parse(path.read_text())))]
    return out


def test_only_the_backends_run_slurms_commands() -> None:
    """No surface or control-plane module runs sbatch, squeue, scancel, scontrol ...
    itself: every job dethpc starts goes through a backend (paced under a site's rate
    limit), and every other Slurm command through ``dethpc.backends.slurm_commands``."""
    assert slurm_calls(PACKAGE) == []


def test_the_slurm_command_rule_finds_a_stray_call(tmp_path: Path) -> None:
    (tmp_path / "surfaces").mkdir()
    (tmp_path / "surfaces" / "x.py").write_text(
        'import subprocess\nsubprocess.run(["squeue", "-h"])\n'
        'if args[:1] == ["sbatch"]:\n    site = record["sbatch"]\n'
        'words = ("scancel",)\n')
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / "y.py").write_text('argv = ["sbatch", "--parsable"]\n')
    assert slurm_calls(tmp_path) == ["surfaces/x.py:2"]
