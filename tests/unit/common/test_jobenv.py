"""The environment table (``dethpc.common.jobenv``) held against the tree.

* every ``DETHPC_*``/``DET_*`` name that the code (strings, docstrings, comments), the job
  script templates, the container files and the docs spell is a row of the table (or a
  name of a family row, or Determined's, classified in ``determined_rules``);
* no Python code outside the table spells a job variable's name in a string: it imports
  the constant (a stray literal fails);
* every row is used: its constant is imported, or a template spells it, or the module
  that reads a login-side setting spells it;
* one constant per row; the docs' generated section is what the generator prints; the
  ``DET_*`` rows are exactly the variables ``determined_rules`` classifies as served.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dethpc.common import jobenv
from dethpc.common.jobenv import TABLE, EnvVar, Setter, Where

REPO = Path(__file__).resolve().parents[3]
TOKEN = re.compile(r"(?<![A-Za-z0-9_])(?:DETHPC|DET)_[A-Z0-9_]*")
#: the table itself, and Determined's inventory of its names (the rule table classifies
#: Determined's variables by their names, dethpc sets only the served ones)
TABLE_MODULE = Path("dethpc/common/jobenv.py")
INVENTORY_MODULE = Path("dethpc/core/determined_rules.py")
#: a placeholder, not a variable: ``$DET_NAME`` for "a variable" in the rule table's keys
PLACEHOLDERS = {INVENTORY_MODULE: {"DET_NAME"}}
SURFACE = REPO / "tests" / "unit" / "data" / "determined" / "surface-0.38.1.json"


@dataclass(frozen=True)
class Hit:
    path: Path
    line: int
    token: str
    #: "code" (a string the program uses), "doc" (docstring or comment) or "text"
    kind: str


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are statements (docstrings, ``#:``-style notes)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            out.add(id(node.value))
    return out


def python_hits(path: Path, text: str) -> Iterator[Hit]:
    tree = ast.parse(text)
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            kind = "doc" if id(node) in docs else "code"
            for token in TOKEN.findall(node.value):
                yield Hit(path, node.lineno, token, kind)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            for token in TOKEN.findall(tok.string):
                yield Hit(path, tok.start[0], token, "doc")


def text_hits(path: Path, text: str) -> Iterator[Hit]:
    for number, line in enumerate(text.splitlines(), 1):
        for token in TOKEN.findall(line):
            yield Hit(path, number, token, "text")


def scan(root: Path, folders: Iterable[str]) -> list[Hit]:
    hits: list[Hit] = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            rel = path.relative_to(root)
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:  # an image
                continue
            hits += python_hits(rel, text) if path.suffix == ".py" else text_hits(rel, text)
    return hits


def known(token: str, table: Iterable[EnvVar]) -> EnvVar | None:
    rows = list(table)
    exact = {row.name: row for row in rows}
    if token in exact:
        return exact[token]
    return next((row for row in rows if row.family and token.startswith(row.name)), None)


def _wildcard(token: str) -> bool:
    return token in ("DETHPC_", "DET_")


def unknown_names(hits: Iterable[Hit], table: Iterable[EnvVar],
                  determined: frozenset[str] | set[str] = frozenset()) -> list[Hit]:
    rows = list(table)
    out = []
    for hit in hits:
        if _wildcard(hit.token) or hit.path == TABLE_MODULE \
                or hit.token in PLACEHOLDERS.get(hit.path, set()):
            continue
        if known(hit.token, rows) is not None:
            continue
        if hit.path == INVENTORY_MODULE and hit.token in determined:
            continue
        out.append(hit)
    return out


def stray_literals(hits: Iterable[Hit], table: Iterable[EnvVar]) -> list[Hit]:
    """Code strings outside the table that spell a job variable's name."""
    rows = list(table)
    out = []
    for hit in hits:
        if hit.kind != "code" or hit.path in (TABLE_MODULE, INVENTORY_MODULE) \
                or _wildcard(hit.token):
            continue
        row = known(hit.token, rows)
        if row is not None and row.where is Where.JOB:
            out.append(hit)
    return out


def constant_names(module: object) -> dict[str, str]:
    """value -> name of the table module's ``ENV_*`` constants."""
    return {value: name for name, value in vars(module).items()
            if name.startswith("ENV_") and isinstance(value, str)}


def identifiers(root: Path) -> set[str]:
    """Every identifier the product's modules but the table use (names, attributes,
    imported names)."""
    out: set[str] = set()
    for path in sorted((root / "dethpc").rglob("*.py")):
        if path.relative_to(root) == TABLE_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name):
                out.add(node.id)
            elif isinstance(node, ast.Attribute):
                out.add(node.attr)
            elif isinstance(node, ast.alias):
                out.add(node.name)
    return out


def unused_rows(table: Iterable[EnvVar], constants: dict[str, str], used_ids: set[str],
                hits: Iterable[Hit]) -> list[str]:
    spelled = {hit.token for hit in hits
               if hit.path != TABLE_MODULE and hit.kind in ("code", "text")}
    rows = list(table)
    out = []
    for row in rows:
        constant = constants.get(row.name)
        if constant is not None and constant in used_ids:
            continue
        if row.name in spelled or (row.family and any(t.startswith(row.name) for t in spelled)):
            continue
        out.append(row.name)
    return out


FOLDERS = ("dethpc", "sbatch_templates", "singularity")


@pytest.fixture(scope="module")
def hits() -> list[Hit]:
    return scan(REPO, FOLDERS)


@pytest.fixture(scope="module")
def inventory_names() -> set[str]:
    return {v["name"] for v in json.loads(SURFACE.read_text())["environment"]}


# ---------------------------------------------------------------- the table's shape
def test_one_constant_per_row_and_one_row_per_constant() -> None:
    names = [row.name for row in TABLE]
    assert len(names) == len(set(names)), "a name has two rows"
    assert set(constant_names(jobenv)) == set(names)
    for row in TABLE:
        assert row.set_by and row.read_by and row.meaning, row
        assert row.name.startswith(("DETHPC_", "DET_")), row
        assert row.family == row.name.endswith("_"), row


def test_the_table_module_imports_only_the_standard_library() -> None:
    tree = ast.parse((REPO / TABLE_MODULE).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "enum", "dataclasses"}, imported


def test_lookup_finds_family_members() -> None:
    assert jobenv.lookup("DETHPC_HP_LR") is jobenv.BY_NAME[jobenv.ENV_HP_PREFIX]
    assert jobenv.lookup("DETHPC_COMPONENT_SERVER_ADDR") \
        is jobenv.BY_NAME[jobenv.ENV_COMPONENT_PREFIX]
    assert jobenv.lookup("DETHPC_COMPONENT") is jobenv.BY_NAME[jobenv.ENV_COMPONENT]
    assert jobenv.lookup("DETHPC_NO_SUCH") is None


# ---------------------------------------------------------------- against the tree
def test_every_name_in_the_tree_is_in_the_table(hits: list[Hit],
                                                inventory_names: set[str]) -> None:
    bad = unknown_names(hits, TABLE, inventory_names)
    assert not bad, "names not in dethpc.common.jobenv.TABLE:\n" + "\n".join(
        f"{h.path}:{h.line}: {h.token}" for h in bad)


def test_every_name_the_docs_spell_is_in_the_table(inventory_names: set[str]) -> None:
    docs = scan(REPO, ("docs",))
    # core-api.md's generated section lists every variable Determined defines, and
    # testing.md the test suite's own settings (which only tests/ reads)
    suites = {m.group(0) for path in (REPO / "tests").rglob("*.py")
              for m in TOKEN.finditer(path.read_text(encoding="utf-8"))}
    bad = [h for h in unknown_names(docs, TABLE)
           if h.token not in inventory_names and h.token not in suites]
    assert not bad, "\n".join(f"{h.path}:{h.line}: {h.token}" for h in bad)


def test_no_code_spells_a_job_variable(hits: list[Hit]) -> None:
    bad = stray_literals(hits, TABLE)
    assert not bad, "import the constant from dethpc.common.jobenv instead:\n" + "\n".join(
        f"{h.path}:{h.line}: {h.token}" for h in bad)


def test_every_row_is_used(hits: list[Hit]) -> None:
    assert not unused_rows(TABLE, constant_names(jobenv), identifiers(REPO), hits)


def test_the_sbatch_wrapper_template_names_exist() -> None:
    text = (REPO / "sbatch_templates" / "sbatch_wrapper.sbatch.j2").read_text()
    used = set(re.findall(r"names\.(\w+)", text))
    assert used and all(isinstance(getattr(jobenv, name, None), str) for name in used)


# ---------------------------------------------------------------- the checks can fail
def test_a_stray_literal_and_an_unknown_name_fail(tmp_path: Path) -> None:
    pkg = tmp_path / "dethpc"
    pkg.mkdir()
    (pkg / "mod.py").write_text(
        '"""Reads ``$DETHPC_TRIAL_DIR``."""\n'
        'import os\n'
        'A = os.environ.get("DETHPC_TRIAL_DIR")  # a stray literal\n'
        'B = f"DETHPC_PREEMPT_SIGNAL={A}"\n'
        'C = os.environ.get("DETHPC_NOT_A_ROW")\n'
        'D = "DETHPC_CLUSTER_CONFIG"  # a login-side setting its reader may spell\n'
        '# DET_NOT_EITHER\n')
    (tmp_path / "sbatch_templates").mkdir()
    (tmp_path / "sbatch_templates" / "x.j2").write_text(
        'export DETHPC_RUN_ID=1 DETHPC_NEW_ONE=2 DETHPC_HP_LR=3\n')
    found = scan(tmp_path, ("dethpc", "sbatch_templates"))
    assert {(h.token, h.line) for h in stray_literals(found, TABLE)} == {
        ("DETHPC_TRIAL_DIR", 3), ("DETHPC_PREEMPT_SIGNAL", 4)}
    assert {h.token for h in unknown_names(found, TABLE)} == {
        "DETHPC_NOT_A_ROW", "DET_NOT_EITHER", "DETHPC_NEW_ONE"}


def test_a_row_nobody_uses_fails(hits: list[Hit]) -> None:
    extra = EnvVar("DETHPC_NOBODY", (Setter.SCRIPT,), "nobody", "unused")
    assert unused_rows([*TABLE, extra], constant_names(jobenv), identifiers(REPO),
                       hits) == ["DETHPC_NOBODY"]


# ---------------------------------------------------------------- Determined's rows
def test_det_rows_are_the_variables_classified_served(inventory_names: set[str]) -> None:
    from dethpc.core import determined_rules as ds

    served = {key[1:] for key, rule in ds.ENV_RULES.items()
              if rule.status in (ds.SERVED, ds.DIFFERENT)}
    ours = {row.name for row in TABLE if row.determined}
    assert ours == served
    assert ours <= inventory_names
    assert all(row.where is Where.JOB for row in TABLE if row.determined)


def test_detenv_reads_its_groups_from_the_table() -> None:
    from dethpc.launch import detenv

    det = [row for row in TABLE if row.determined]
    assert set(detenv.STATIC) == {r.name for r in det if Setter.SCRIPT in r.set_by}
    assert set(detenv.RUN) == {r.name for r in det if Setter.RUN_START in r.set_by}
    assert set(detenv.NODE) <= set(detenv.RUN)
    assert detenv.LAUNCHER == (jobenv.ENV_DET_CHIEF_IP,)


# ---------------------------------------------------------------- the doc
def test_the_doc_shows_the_generated_table() -> None:
    text = (REPO / "docs" / "job-environment.md").read_text()
    assert jobenv.DOC_BEGIN in text and jobenv.DOC_END in text
    section = text[text.index(jobenv.DOC_BEGIN):text.index(jobenv.DOC_END)
                   + len(jobenv.DOC_END)] + "\n"
    assert section == jobenv.doc_section(), (
        "docs/job-environment.md is stale: python scripts/job_environment.py --write")


def test_the_doc_lists_every_row() -> None:
    section = jobenv.doc_section()
    for row in TABLE:
        assert f"`{row.name}" in section, row.name
