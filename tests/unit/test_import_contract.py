"""The import contract (docs/architecture.md): the layers of ``dethpc/`` as import-linter
contracts (``[tool.importlinter]`` in pyproject.toml), plus two rules import-linter does
not state: no import cycle between any two modules, and no module importing, through its
package's ``__init__``, a package whose ``__init__`` imports that module back.

Each rule is also run once against a scratch copy of the package with a deliberately
wrong import, so these tests are known to fail when the house is broken.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[2]


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over the ``dethpc`` package found under ``root``, with ``root``'s
    pyproject.toml (no cache: a scratch copy must not reuse the real tree's graph)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
         "sys.exit(lint_imports(no_cache=True, no_logo=True))"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300)


def module_graph() -> grimp.ImportGraph:
    """grimp's graph of the ``dethpc`` package this interpreter imports (no cache)."""
    return grimp.build_graph("dethpc", include_external_packages=False, cache_dir=None)


def house_problems(root: Path) -> list[str]:
    """Cycles and init back-imports of the ``dethpc`` under ``root``, found by a fresh
    interpreter (grimp locates the package through the import system, and this one has
    imported the real tree already)."""
    code = ("import json, sys; from pathlib import Path; "
            "from tests.unit.test_import_contract import cycles, init_back_imports, "
            "module_graph; g = module_graph(); "
            "print(json.dumps([' '.join(c) for c in cycles(g)] "
            "+ init_back_imports(Path(sys.argv[1]), g)))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", code, str(root)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300, check=True)
    problems: list[str] = json.loads(done.stdout)
    return problems


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        group.append(top)
                        if top == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(edges.get(child, ()))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def init_back_imports(root: Path, graph: grimp.ImportGraph) -> list[str]:
    """Modules that import their own ancestor package by name (``from dethpc.core import
    x``, ``import dethpc``) while that package's ``__init__`` imports them, directly or
    through others: an import cycle that the module graph hides when ``x`` is a
    submodule."""
    found = []
    for path in sorted((root / "dethpc").rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        module = ".".join(parts)
        if module not in graph.modules:
            continue
        ancestors = {".".join(parts[:i]) for i in range(1, len(parts))}
        for node in ast.walk(ast.parse(path.read_text())):
            named: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in ancestors:
                named = [node.module]
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                named = [".".join(parts[:len(parts) - node.level + (rel.name == "__init__")])]
            elif isinstance(node, ast.Import):
                named = [a.name for a in node.names if a.name in ancestors]
            for package in named:
                if package in graph.modules and graph.chain_exists(importer=package,
                                                                   imported=module):
                    found.append(f"{module} (line {node.lineno}) imports {package}, "
                                 f"whose __init__ imports it")
    return found


# ------------------------------------------------------------------------- the tree
def test_the_layers_and_contracts_hold() -> None:
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "broken" not in done.stdout.lower().replace("0 broken", ""), done.stdout


def test_no_module_is_in_an_import_cycle() -> None:
    assert cycles(module_graph()) == []


def test_no_module_imports_a_package_whose_init_imports_it() -> None:
    assert init_back_imports(REPO, module_graph()) == []


def test_every_package_says_what_it_owns_and_must_not_do() -> None:
    """Every package's ``__init__`` has a docstring with "Owns"/"owns" and "Must not"
    (the top-level packages say it about the layer; docs/architecture.md maps them)."""
    missing = []
    for init in sorted((REPO / "dethpc").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if "owns" not in doc.lower() or "must not" not in doc.lower():
            missing.append(str(init.relative_to(REPO)))
    assert missing == []


# ------------------------------------------------------- a scratch copy, broken on purpose
@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "dethpc", tmp_path / "dethpc",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")


@pytest.mark.parametrize(("module", "wrong", "says"), [
    # the job side reaching for the control plane
    ("core/_info.py", "import dethpc.control.daemon", "dethpc.core is not allowed"),
    # job building reaching for the CLI
    ("jobs/render.py", "import dethpc.surfaces.cli.main", "dethpc.jobs is not allowed"),
    # product code importing the dev cluster
    ("control/lease.py", "import dethpc.devcluster.cluster", "not allowed to import "
                                                              "dethpc.devcluster"),
    # a login-node core importing the job side
    ("store/models.py", "import dethpc.core._info", "dethpc.store is not allowed"),
    # a pure rule of the control plane reaching up for the daemon
    ("control/job_end.py", "import dethpc.control.daemon.loop", "dethpc.control.job_end is not "
                                                                 "allowed"),
])
def test_a_wrong_import_breaks_the_contract(scratch: Path, module: str, wrong: str,
                                            says: str) -> None:
    _append(scratch / "dethpc" / module, wrong)
    done = lint_imports(scratch)
    assert done.returncode != 0
    assert says in done.stdout, done.stdout


def test_a_cycle_and_an_init_back_import_are_found(scratch: Path) -> None:
    _append(scratch / "dethpc" / "common" / "paths.py", "import dethpc.common.kinds")
    _append(scratch / "dethpc" / "common" / "kinds.py", "import dethpc.common.paths")
    _append(scratch / "dethpc" / "core" / "_train.py", "from dethpc.core import Context")
    problems = house_problems(scratch)
    assert "dethpc.common.kinds dethpc.common.paths" in problems
    assert any(p.startswith("dethpc.core._train ") for p in problems), problems


def test_the_scratch_copy_is_clean_before_it_is_broken(scratch: Path) -> None:
    """The scratch checks see the scratch tree, not this one: unbroken, it is clean."""
    assert house_problems(scratch) == []
