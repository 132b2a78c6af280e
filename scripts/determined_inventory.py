#!/usr/bin/env python3
"""Inventory of what a user's code can reach in Determined's harness, read from its source.

Owns: the rules that decide which of Determined's names are public, and the writing of
``tests/unit/data/determined/surface-<version>.json`` (sorted, stable: the same source
gives the same bytes). Determined is never imported: every module is parsed with ``ast``.
Must not: be imported by dethpc (it is a maintainer's tool; the unit tests read only the
JSON it wrote) or copy any of Determined's text beyond names, parameter lists, default
values and enum values.

Re-run it (after a Determined upgrade, or a change to the rules below)::

    python scripts/determined_inventory.py \\
        --mirror /work/.mirror/determined-ai+determined/repo --tag v0.38.1
    # or, with a checkout or an unpacked archive of Determined's repository:
    python scripts/determined_inventory.py --source /tmp/det-0.38.1 --version 0.38.1

then ``pytest tests/unit/core/test_determined_surface.py`` says which new names need a
line in ``dethpc/core/determined_rules.py``, and::

    python scripts/determined_inventory.py --doc [--version 0.38.1]

rewrites the generated section of docs/core-api.md from the committed inventory and that
table (``dethpc.core.determined_rules.doc_table``), reading no Determined source.

What counts as public (a user's code can reach it after ``import determined as det``):

* the packages in ``PACKAGES``: every name their ``__init__`` binds without a leading
  underscore (``__all__`` instead, where one is defined), plus ``__version__``; names
  imported there from outside Determined (``importlib.metadata``) are not Determined's;
* the modules in ``WALKED_MODULES`` (re-exported as a module, e.g. ``pytorch.samplers``):
  every top-level public function, class and constant;
* every public class found so: its public methods, properties, class attributes, the
  attributes ``__init__`` assigns to ``self``, the protocol methods in
  ``PROTOCOL_DUNDERS``, and the same of its bases that are defined in Determined
  (recorded with ``inherited_from``); ``__init__``'s parameters are the class's signature;
* the launchers in ``LAUNCHERS`` (``python3 -m determined.launch.X``): the module and
  each ``add_argument`` option of its parser;
* the modules in ``USAGE_MODULES`` (``determined.common.util``, ``determined.util``,
  ``determined.errors``): only the public names that Determined's own ``examples/`` and
  ``e2e_tests/`` use (their imports and ``alias.name`` references are resolved per file);
* the environment: every ``DET_*`` name found as a string literal in the places listed in
  ``ENV_SOURCES`` (the master and agent code that builds a task's environment, the scripts
  that run inside a task, the harness), each with where it was found.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "unit" / "data" / "determined"

#: packages whose ``__init__`` re-exports are the API
PACKAGES = ("determined", "determined.core", "determined.pytorch",
            "determined.pytorch.deepspeed")
#: modules a package re-exports as a module and whose every public name is API
WALKED_MODULES = ("determined.pytorch.samplers",)
#: ``python3 -m determined.launch.<name>``
LAUNCHERS = ("determined.launch.torch_distributed", "determined.launch.deepspeed",
             "determined.launch.horovod", "determined.launch.tensorflow",
             "determined.launch.wrap_rank")
#: helper modules: only the names Determined's examples and e2e tests use
USAGE_MODULES = ("determined.common.util", "determined.util", "determined.errors")
USAGE_TREES = ("examples", "e2e_tests")
#: dunder methods that make a class usable in a statement (``with``, ``for``, a call)
PROTOCOL_DUNDERS = frozenset({"__enter__", "__exit__", "__call__", "__iter__", "__next__",
                              "__len__", "__getitem__"})
#: where a trial's ``DET_*`` variables are set or read: (path, glob, why)
ENV_SOURCES = (
    ("master/pkg/tasks", "*.go", "the master's task specs (TaskSpec.EnvVars, the trial's, "
                                 "the Slurm dispatcher's)"),
    ("master/internal/rm", "**/*.go", "the resource managers (Kubernetes pods)"),
    ("master/internal/sproto", "*.go", "the master's task protocol"),
    ("agent/internal", "**/*.go", "the agent's containers"),
    ("master/static/srv", "*.sh", "the scripts that run inside a task"),
    ("master/static/srv", "*.py", "the scripts that run inside a task"),
    ("harness/determined", "**/*.py", "the harness (cli/ and deploy/ run outside tasks)"),
)
ENV_SKIP_PARTS = frozenset({"cli", "deploy", "tests", "testutil"})
_DET_VAR = re.compile(r"^DET_[A-Z0-9_]*[A-Z0-9]$")
_DET_VAR_IN_TEXT = re.compile(r"\bDET_[A-Z0-9_]*[A-Z0-9]\b")
_GO_LITERAL = re.compile(r'"(DET_[A-Z0-9_]*[A-Z0-9])"')


# --------------------------------------------------------------------------- source
@dataclass
class Module:
    """One parsed module of Determined's harness."""

    name: str
    path: Path
    rel: str
    tree: ast.Module
    #: local name -> (module, attribute or None for a module import)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    defs: dict[str, ast.stmt] = field(default_factory=dict)
    all_names: list[str] | None = None


class Source:
    """Determined's repository on disk: module lookup and parsing (cached)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.harness = root / "harness"
        self._cache: dict[str, Module | None] = {}

    def module_file(self, name: str) -> Path | None:
        base = self.harness.joinpath(*name.split("."))
        if (base / "__init__.py").is_file():
            return base / "__init__.py"
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
        return None

    def is_module(self, name: str) -> bool:
        return name.startswith("determined") and self.module_file(name) is not None

    def module(self, name: str) -> Module:
        if name not in self._cache:
            self._cache[name] = self._parse(name)
        found = self._cache[name]
        if found is None:
            raise SystemExit(f"determined_inventory: module {name} not found under "
                             f"{self.harness}")
        return found

    def _parse(self, name: str) -> Module | None:
        path = self.module_file(name)
        if path is None:
            return None
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        mod = Module(name=name, path=path, rel=path.relative_to(self.root).as_posix(),
                     tree=tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _top_level(tree.body):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(node, package)
                for alias in node.names:
                    local = alias.asname or alias.name
                    sub = f"{base}.{alias.name}"
                    if self.is_module(sub):
                        mod.imports[local] = (sub, None)
                    else:
                        mod.imports[local] = (base, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        mod.imports[alias.asname] = (alias.name, None)
                    else:
                        top = alias.name.split(".")[0]
                        mod.imports[top] = (top, None)
            elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                mod.defs[node.name] = node  # the last definition wins (overloads)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                for target in _targets(node):
                    mod.defs[target] = node
                    if target == "__all__":
                        mod.all_names = _literal_strings(node.value)
        return mod

    def resolve(self, module: str, name: str, depth: int = 0
                ) -> tuple[Module, ast.stmt] | tuple[str, None] | None:
        """Where ``module.name`` is defined: (module, its node), or (module name, None)
        when it names a module, or None when it comes from outside Determined."""
        if depth > 20:
            raise SystemExit(f"determined_inventory: import cycle at {module}.{name}")
        if self.is_module(f"{module}.{name}") and name not in self.module(module).defs \
                and name not in self.module(module).imports:
            return f"{module}.{name}", None
        mod = self.module(module)
        if name in mod.defs:
            return mod, mod.defs[name]
        if name in mod.imports:
            target, attr = mod.imports[name]
            if not target.startswith("determined"):
                return None
            if attr is None:
                return target, None
            return self.resolve(target, attr, depth + 1)
        return None


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements at module level, looking into ``try``/``if`` blocks (optional imports)."""
    for node in body:
        if isinstance(node, ast.Try):
            yield from _top_level(node.body)
            for handler in node.handlers:
                yield from _top_level(handler.body)
        elif isinstance(node, ast.If):
            if _is_type_checking(node.test):
                continue
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        else:
            yield node


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.Assign | ast.AnnAssign) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _literal_strings(node: ast.expr | None) -> list[str] | None:
    if isinstance(node, ast.List | ast.Tuple):
        return [e.value for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return None


def _public(name: str) -> bool:
    return not name.startswith("_")


# ------------------------------------------------------------------------ signatures
def signature(args: ast.arguments, *, drop_first: bool) -> list[dict[str, Any]]:
    """The parameters as ``inspect.Parameter`` would name their kinds, with defaults as
    source text; the bound first parameter (``self``/``cls``) left out."""
    out: list[dict[str, Any]] = []
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        kind = "POSITIONAL_ONLY" if i < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append(_param(arg.arg, kind, default))
    if args.vararg is not None:
        out.append(_param(args.vararg.arg, "VAR_POSITIONAL", None))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out.append(_param(arg.arg, "KEYWORD_ONLY", kw_default))
    if args.kwarg is not None:
        out.append(_param(args.kwarg.arg, "VAR_KEYWORD", None))
    return out[1:] if drop_first and out else out


def _param(name: str, kind: str, default: ast.expr | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "kind": kind}
    if default is not None:
        entry["default"] = ast.unparse(default)
    return entry


def _decorators(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names: set[str] = set()
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            names.add(target.attr)
            if target.attr in ("setter", "deleter"):
                names.add("accessor")
    return names


# --------------------------------------------------------------------------- entries
@dataclass
class Inventory:
    source: Source
    entries: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def add(self, module: str, name: str, kind: str, where: str, **extra: Any) -> None:
        entry = {"module": module, "name": name, "kind": kind, "source": where}
        entry.update({k: v for k, v in extra.items()
                      if v is not None and v is not False and (k == "signature" or v)})
        self.entries.setdefault((module, name), entry)

    # ------------------------------------------------------------------ modules
    def package(self, package: str) -> None:
        mod = self.source.module(package)
        names = mod.all_names if mod.all_names is not None else sorted(
            {*mod.defs, *mod.imports})
        for name in names:
            if not (_public(name) or name == "__version__"):
                continue
            self.name(package, name, mod)

    def walked(self, module: str) -> None:
        mod = self.source.module(module)
        self.add(module.rpartition(".")[0], module.rpartition(".")[2], "module", mod.rel)
        for name in sorted(mod.defs):
            if _public(name):
                self.name(module, name, mod)

    def name(self, module: str, name: str, mod: Module) -> None:
        found = self.source.resolve(module, name)
        if found is None:
            if name in mod.defs:      # e.g. __version__ = metadata.version(...)
                self._define(module, name, mod, mod.defs[name])
            return
        where_mod, node = found
        if node is None:
            assert isinstance(where_mod, str)
            target = self.source.module(where_mod)
            self.add(module, name, "module", target.rel, target=where_mod)
            return
        assert isinstance(where_mod, Module)
        self._define(module, name, where_mod, node)

    def _define(self, module: str, name: str, where: Module, node: ast.stmt) -> None:
        loc = f"{where.rel}:{node.lineno}"
        if isinstance(node, ast.ClassDef):
            self._class(module, name, where, node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            decs = _decorators(node)
            self.add(module, name, "function", loc,
                     signature=signature(node.args, drop_first=False),
                     contextmanager="contextmanager" in decs)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            value = node.value
            kind = "constant" if name.isupper() else "attribute"
            self.add(module, name, kind, loc,
                     value=ast.unparse(value) if isinstance(value, ast.Constant) else None)

    # ------------------------------------------------------------------ classes
    def _class(self, module: str, name: str, where: Module, node: ast.ClassDef) -> None:
        bases = [ast.unparse(b) for b in node.bases]
        chain = list(self._mro(where, node))
        sig = None
        for _, cls in chain:
            fn = _method(cls, "__init__")
            if fn is not None:
                sig = signature(fn.args, drop_first=True)
                break
        is_enum = any(b.split(".")[-1] in ("Enum", "IntEnum", "StrEnum") for _, c in chain
                      for b in (ast.unparse(x) for x in c.bases))
        self.add(module, name, "class", f"{where.rel}:{node.lineno}", bases=bases,
                 signature=sig, enum=is_enum)
        seen: set[str] = set()
        for owner_mod, cls in chain:
            for inner in cls.body:
                if isinstance(inner, ast.ClassDef) and _public(inner.name) \
                        and inner.name not in seen:
                    seen.add(inner.name)
                    self._class(module, f"{name}.{inner.name}", owner_mod, inner)
        for owner_mod, cls in chain:
            inherited = None if cls is node else f"{owner_mod.name}.{cls.name}"
            for member, entry in self._members(owner_mod, cls, is_enum):
                if member in seen:
                    continue
                seen.add(member)
                kind = entry.pop("kind")
                self.add(module, f"{name}.{member}", kind, entry.pop("source"),
                         inherited_from=inherited, **entry)

    def _mro(self, mod: Module, node: ast.ClassDef) -> Iterator[tuple[Module, ast.ClassDef]]:
        """The class and its bases defined in Determined, depth first (left to right)."""
        yield mod, node
        for base in node.bases:
            text = ast.unparse(base)
            head, _, attr = text.rpartition(".")
            if head:
                target = mod.imports.get(head)
                found = (self.source.resolve(target[0], attr)
                         if target and target[1] is None
                         and self.source.is_module(target[0]) else None)
            else:
                found = self.source.resolve(mod.name, text)
            if found is not None and isinstance(found[1], ast.ClassDef):
                base_mod = found[0]
                assert isinstance(base_mod, Module)
                yield from self._mro(base_mod, found[1])

    def _members(self, mod: Module, cls: ast.ClassDef, is_enum: bool
                 ) -> Iterator[tuple[str, dict[str, Any]]]:
        seen: dict[str, dict[str, Any]] = {}
        for node in cls.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                decs = _decorators(node)
                if "overload" in decs or "accessor" in decs:
                    if "accessor" in decs and node.name in seen:
                        seen[node.name]["settable"] = True
                    continue
                if not (_public(node.name) or node.name in PROTOCOL_DUNDERS):
                    continue
                loc = f"{mod.rel}:{node.lineno}"
                if "property" in decs or "cached_property" in decs:
                    seen[node.name] = {"kind": "property", "source": loc}
                    continue
                kind = ("classmethod" if "classmethod" in decs else
                        "staticmethod" if "staticmethod" in decs else "method")
                seen[node.name] = {
                    "kind": kind, "source": loc,
                    "signature": signature(node.args, drop_first=kind != "staticmethod"),
                    "abstract": "abstractmethod" in decs,
                    "contextmanager": "contextmanager" in decs}
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                for target in _targets(node):
                    if _public(target) and target not in seen:
                        value = node.value
                        seen[target] = {
                            "kind": "attribute", "source": f"{mod.rel}:{node.lineno}",
                            "value": (ast.unparse(value) if is_enum and value is not None
                                      else None)}
        init = _method(cls, "__init__")
        if init is not None:
            for stmt in ast.walk(init):
                if isinstance(stmt, ast.Assign | ast.AnnAssign):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    for t in targets:
                        if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                                and t.value.id == "self" and _public(t.attr)
                                and t.attr not in seen):
                            seen[t.attr] = {"kind": "attribute",
                                            "source": f"{mod.rel}:{stmt.lineno}"}
        yield from seen.items()

    # ---------------------------------------------------------------- launchers
    def launcher(self, module: str) -> None:
        mod = self.source.module(module)
        parent, _, leaf = module.rpartition(".")
        self.add(parent, leaf, "module", mod.rel, launcher=True)
        for call in ast.walk(mod.tree):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "add_argument"):
                continue
            flags = [a.value for a in call.args
                     if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not flags:
                continue
            options = {k.arg: ast.unparse(k.value) for k in call.keywords
                       if k.arg in ("nargs", "action", "default", "metavar", "type")}
            self.add(module, flags[0], "cli_option", f"{mod.rel}:{call.lineno}",
                     aliases=flags[1:], options=options)

    # -------------------------------------------------------------------- usage
    def used(self, module: str, users: dict[str, list[str]]) -> None:
        mod = self.source.module(module)
        parent, _, leaf = module.rpartition(".")
        self.add(parent, leaf, "module", mod.rel, usage_scanned=True)
        for name in sorted(users):
            if not _public(name):
                continue
            found = self.source.resolve(module, name)
            if found is None or found[1] is None:
                continue
            self.name(module, name, mod)
            self.entries[(module, name)]["used_by"] = users[name][:3]
            self.entries[(module, name)]["used_by_count"] = len(users[name])


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    found = None
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            if "overload" not in _decorators(node):
                found = node
    return found


# ----------------------------------------------------------------- usage scanning
def usage(root: Path, modules: tuple[str, ...]) -> dict[str, dict[str, list[str]]]:
    """For each module: public name -> files of ``USAGE_TREES`` that use it."""
    found: dict[str, dict[str, set[str]]] = {m: {} for m in modules}
    for tree_name in USAGE_TREES:
        for path in sorted((root / tree_name).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            try:
                tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
            except SyntaxError:
                continue
            for dotted in _dotted_uses(tree):
                for module in modules:
                    if dotted.startswith(module + "."):
                        name = dotted[len(module) + 1:].split(".")[0]
                        found[module].setdefault(name, set()).add(rel)
    return {m: {n: sorted(files) for n, files in names.items()} for m, names in found.items()}


def _dotted_uses(tree: ast.Module) -> Iterator[str]:
    """Fully qualified ``determined...`` names a file uses: ``from M import n`` gives
    ``M.n``; ``alias.a.b`` gives the alias's module followed by ``.a.b``."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level \
                and node.module.startswith("determined"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                aliases[alias.asname or alias.name] = full
                yield full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("determined"):
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts: list[str] = []
            cur: ast.expr = node
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in aliases:
                yield ".".join([aliases[cur.id], *reversed(parts)])


# --------------------------------------------------------------------- environment
def environment(root: Path) -> list[dict[str, Any]]:
    """Every ``DET_*`` variable found in ``ENV_SOURCES``, with file:line of each find."""
    found: dict[str, set[str]] = {}
    for base, pattern, _why in ENV_SOURCES:
        for path in sorted((root / base).glob(pattern)):
            rel = path.relative_to(root).as_posix()
            if ENV_SKIP_PARTS & set(Path(rel).parts) or path.name.endswith("_test.go") \
                    or path.name.startswith("test_"):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for line_no, name in _env_names(path, text):
                found.setdefault(name, set()).add(f"{rel}:{line_no}")
    return [{"name": name, "found_in": sorted(where, key=_loc_key)}
            for name, where in sorted(found.items())]


def _loc_key(loc: str) -> tuple[str, int]:
    path, _, line = loc.rpartition(":")
    return path, int(line)


def _env_names(path: Path, text: str) -> Iterator[tuple[int, str]]:
    if path.suffix == ".py":
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and _DET_VAR.match(node.value):
                yield node.lineno, node.value
    elif path.suffix == ".go":
        for i, line in enumerate(text.splitlines(), 1):
            for m in _GO_LITERAL.finditer(line):
                yield i, m.group(1)
    else:
        for i, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            for m in _DET_VAR_IN_TEXT.finditer(line):
                yield i, m.group(0)


# ----------------------------------------------------------------------------- main
def build(root: Path, version: str, origin: dict[str, str]) -> dict[str, Any]:
    source = Source(root)
    inv = Inventory(source)
    for package in PACKAGES:
        inv.package(package)
    for module in WALKED_MODULES:
        inv.walked(module)
    for module in LAUNCHERS:
        inv.launcher(module)
    uses = usage(root, USAGE_MODULES)
    for module in USAGE_MODULES:
        inv.used(module, uses[module])
    names = [inv.entries[k] for k in sorted(inv.entries)]
    return {"determined": {"version": version, **origin},
            "generated_by": "scripts/determined_inventory.py",
            "names": names, "environment": environment(root)}


def _from_mirror(mirror: Path, tag: str, into: Path) -> dict[str, str]:
    commit = subprocess.run(["git", "-C", str(mirror), "rev-parse", f"{tag}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    paths = ["harness", "master/pkg", "master/internal", "master/static/srv", "agent",
             *USAGE_TREES]
    archive = subprocess.run(["git", "-C", str(mirror), "archive", tag, *paths],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return {"tag": tag, "commit": commit}


def write_doc(version: str, check: bool = False) -> int:
    """docs/core-api.md with its generated section replaced (``--doc``)."""
    sys.path.insert(0, str(REPO))
    from dethpc.core.determined_rules import DOC_BEGIN, DOC_END, doc_table

    inventory = json.loads((DEFAULT_OUT / f"surface-{version}.json").read_text("utf-8"))
    doc = REPO / "docs" / "core-api.md"
    text = doc.read_text(encoding="utf-8")
    if DOC_BEGIN not in text or DOC_END not in text:
        raise SystemExit(f"{doc}: no generated section ({DOC_BEGIN} ... {DOC_END})")
    head, rest = text.split(DOC_BEGIN, 1)
    tail = rest.split(DOC_END, 1)[1].lstrip("\n")
    new = head + doc_table(inventory) + ("\n" + tail if tail else "")
    if check:
        print(f"{doc}: {'up to date' if new == text else 'stale'}")
        return 0 if new == text else 1
    doc.write_text(new, encoding="utf-8")
    print(f"wrote the generated section of {doc}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--mirror", type=Path, help="a git clone/mirror of Determined")
    where.add_argument("--source", type=Path, help="Determined's repository tree on disk")
    parser.add_argument("--tag", help="with --mirror: the tag to read (e.g. v0.38.1)")
    parser.add_argument("--version", help="the version label (default: the tag without v)")
    parser.add_argument("--out", type=Path, help="the JSON file to write (default: "
                        "tests/unit/data/determined/surface-<version>.json)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the committed file differs")
    parser.add_argument("--doc", action="store_true",
                        help="rewrite docs/core-api.md's generated section from the committed "
                        "inventory and dethpc's classification (no Determined source needed)")
    args = parser.parse_args(argv)
    if args.doc:
        return write_doc(args.version or "0.38.1", args.check)
    if args.mirror is None and args.source is None:
        parser.error("give --mirror (with --tag) or --source, or --doc")
    with tempfile.TemporaryDirectory() as tmp:
        if args.mirror is not None:
            if not args.tag:
                parser.error("--mirror needs --tag")
            origin = _from_mirror(args.mirror, args.tag, Path(tmp))
            root = Path(tmp)
        else:
            origin = {}
            root = args.source
        version = args.version or (args.tag or "").lstrip("v")
        if not version:
            parser.error("--source needs --version")
        data = build(root, version, origin)
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    out = args.out or DEFAULT_OUT / f"surface-{version}.json"
    if args.check:
        same = out.is_file() and out.read_text(encoding="utf-8") == text
        print(f"{out}: {'up to date' if same else 'differs from the source'}")
        return 0 if same else 1
    out.write_text(text, encoding="utf-8")
    kinds: dict[str, int] = {}
    for entry in data["names"]:
        kinds[entry["module"]] = kinds.get(entry["module"], 0) + 1
    print(f"wrote {out}: {len(data['names'])} names "
          f"({', '.join(f'{m} {n}' for m, n in sorted(kinds.items()))}), "
          f"{len(data['environment'])} environment variables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
