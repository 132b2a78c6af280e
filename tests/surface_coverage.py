"""Which of Determined's served names the programs of a run exercised (issue 31, item 4).

``required()`` lists the inventory's names that dethpc serves (served or served
differently: the user's code may call them); ``EXEMPT`` those no job here can run. A name
is **exercised** when:

* a module-level function: a process of the programs ran the dethpc function that serves
  it (the trace of ``tests/fixtures/surface_trace``);
* a method, classmethod or property of a dethpc class: a method of that name ran on an
  object of the class or of a subclass (``Dummy*`` names need the Dummy twin; a user's
  override counts: the Trainer calling a ``PyTorchTrial``'s ``train_batch``), by the
  program or by dethpc on its behalf;
* a class of dethpc's: one of its methods ran on an instance (or the class); an enum,
  an exception, or a class that is not dethpc's counts when a program names it;
* a module: a program imports it or names it;
* an attribute, constant or enum member: a program reads an attribute of that name or
  names it (``ast``; what it read is checked by the program's own asserts);
* a launcher's option: the programs' configs' entrypoints spell it (``--trial``) or run
  the launcher with a script (``script``).

Pure: the caller gives the traces, the programs' sources and the entrypoints.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dethpc.core import determined_rules as ds

INVENTORY = Path(__file__).resolve().parent / "unit" / "data" / "determined" / \
    "surface-0.38.1.json"
#: the statuses whose names a user's code may call
CALLABLE_STATUSES = (ds.SERVED, ds.DIFFERENT)

_HOROVOD = ("horovod is not installed here or in CI (its wheel builds against MPI and a "
            "framework at install time); the launcher's argv mapping is unit-tested "
            "(tests/unit/core/test_determined_surface.py) and dethpc.launch.horovod's MPI "
            "path is the mpi4py launcher's")
_WRAP_RANK = ("a program spawns it (Determined's launchers and Core API material do), no "
              "entrypoint names it: tests/local/test_determined_oracle.py runs it in a "
              "local-backend job and compares its bytes with Determined's own wrap_rank")
#: served names no job here can run, and why
EXEMPT: dict[str, str] = {
    "determined.core.DistributedContext.from_horovod": _HOROVOD,
    "determined.core.DummyDistributedContext.from_horovod": _HOROVOD,
    "determined.launch.horovod": _HOROVOD,
    "determined.launch.horovod.--autohorovod": _HOROVOD,
    "determined.launch.horovod.--trial": _HOROVOD,
    "determined.launch.horovod.script": _HOROVOD,
    **{f"determined.launch.wrap_rank{part}": _WRAP_RANK
       for part in ("", ".rank", ".script", ".--no-redirect-stdio")},
}
NAME_KINDS = ("attribute", "constant")


@dataclass(frozen=True)
class Call:
    """One traced call: the module and qualname of the function that ran, and the dethpc
    classes (``module:qualname``) its ``self``/``cls`` is or derives from."""

    module: str
    qualname: str
    receiver: tuple[str, ...] = ()


def load_inventory(path: Path = INVENTORY) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text())["names"])


def required(inventory: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The inventory entries dethpc serves, with their key and dethpc path."""
    out = []
    for entry in inventory:
        key = ds.entry_key(entry)
        found = ds.rule_for(key)
        if found is not None and found[1].status in CALLABLE_STATUSES:
            out.append({**entry, "key": key, "path": ds.dethpc_path(key)})
    return out


def resolve(path: str) -> Any:
    """The object at dotted ``path`` (the longest importable module, then attributes)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
            break
        except ImportError:
            continue
    else:  # pragma: no cover - "dethpc" always imports
        raise LookupError(path)
    for part in parts[cut:]:
        obj = getattr(obj, part)
    return obj


def _owner(path: str) -> tuple[Any, str]:
    """The class (or module) holding the last part of ``path``, and that part."""
    outer, _, attr = path.rpartition(".")
    return resolve(outer), attr


def _function(owner: Any, attr: str) -> Any:
    """The plain function behind ``owner.attr`` (a property's getter, a classmethod's
    function, a method found along the MRO)."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if attr in vars(klass):
                raw = vars(klass)[attr]
                if isinstance(raw, property):
                    return raw.fget
                if isinstance(raw, (classmethod, staticmethod)):
                    return inspect.unwrap(raw.__func__)
                return inspect.unwrap(raw) if callable(raw) else raw
        raise AttributeError(attr)
    return inspect.unwrap(getattr(owner, attr))


def _key(func: Any) -> tuple[str, str] | None:
    code = getattr(func, "__code__", None)
    if code is None:
        return None
    return func.__module__, code.co_qualname


def class_key(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _ours(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module == "dethpc" or module.startswith("dethpc.")


#: the builtin a program calls for a protocol method of an object that is not dethpc's
DUNDER_BUILTINS = {"__iter__": "iter", "__len__": "len", "__enter__": "with",
                   "__exit__": "with"}


def names_in(sources: Iterable[str]) -> set[str]:
    """Every attribute name read and every name used or imported in ``sources``."""
    out: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute):
                out.add(node.attr)
            elif isinstance(node, ast.Name):
                out.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                if isinstance(node, ast.ImportFrom) and node.module:
                    out.update(node.module.split("."))
                for alias in node.names:
                    out.update(alias.name.split("."))
    return out


@dataclass
class Coverage:
    calls: set[Call]
    #: ``names_in(the programs' sources)``
    names: set[str]
    #: the entrypoints of the programs' configs
    entrypoints: list[str]

    def _method_called(self, owner: type, attr: str) -> bool:
        """``attr`` ran on an object of ``owner`` or of a subclass (the user's override
        counts: the Trainer calling a trial's ``train_batch``)."""
        want = class_key(owner)
        return any(c.qualname.rsplit(".", 1)[-1] == attr and want in c.receiver
                   for c in self.calls)

    def _function_called(self, func: Any) -> bool:
        key = _key(func)
        return key is not None and any((c.module, c.qualname) == key for c in self.calls)

    def _named(self, attr: str) -> bool:
        return attr in self.names or DUNDER_BUILTINS.get(attr, "") in self.names

    def exercised(self, entry: Mapping[str, Any]) -> bool:
        kind, path, key = entry["kind"], entry["path"], entry["key"]
        last = key.rsplit(".", 1)[-1]
        if kind == "cli_option":
            launcher = key.rsplit(".", 1)[0]
            spelled = [e.split() for e in self.entrypoints if launcher in e.split()]
            if last == "script":   # a script after the launcher (not --trial)
                return any("--trial" not in argv for argv in spelled)
            return any(last in argv for argv in spelled)
        if kind == "module" and key.startswith("determined.launch."):
            return any(key in e.split() for e in self.entrypoints)
        if kind == "module" or kind in NAME_KINDS:
            return last in self.names
        if kind == "class":
            obj = resolve(path)
            if not isinstance(obj, type) or issubclass(obj, (enum.Enum, BaseException)) \
                    or not _ours(obj):
                return last in self.names
            return any(class_key(obj) in c.receiver for c in self.calls) or \
                self._function_called(getattr(obj, "__init__", None))
        owner, attr = _owner(path)
        if not isinstance(owner, type):          # a module's function
            func = getattr(owner, attr, None)
            return self._function_called(inspect.unwrap(func)) if _ours(func) \
                else self._named(attr)
        if not _ours(owner):                      # torch's class under Determined's name
            return self._named(attr)
        try:
            func = _function(owner, attr)
        except AttributeError:                    # an instance attribute on dethpc's side
            return last in self.names
        if not callable(func) or isinstance(func, (type, enum.Enum)):
            return last in self.names
        return self._method_called(owner, attr)

    def missing(self, entries: Iterable[Mapping[str, Any]]) -> list[str]:
        return sorted(e["key"] for e in entries if not self.exercised(e))


def read_traces(directory: Path) -> set[Call]:
    calls: set[Call] = set()
    for path in sorted(directory.glob("*.json")):
        for module, qualname, receiver in json.loads(path.read_text())["calls"]:
            calls.add(Call(module, qualname, tuple(receiver)))
    return calls
