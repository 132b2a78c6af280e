"""``determined`` inside a dethpc trial's job: an alias of ``dethpc`` (docs/core-api.md,
"import determined inside a trial").

Owns: making ``import determined``, ``from determined import pytorch``,
``import determined.pytorch.deepspeed`` and ``python3 -m determined.launch.<name>`` resolve
to dethpc's own modules (the same module objects: ``determined.pytorch is dethpc.pytorch``)
in a trial's interpreter, where ``dethpc.launch.determined_alias`` put this directory on
``PYTHONPATH`` because no real Determined was importable there; and stepping aside for a
real Determined found later on ``sys.path`` (installed by a startup hook, say): it is loaded
in this module's place, so the alias never shadows an installation.
A ``determined.launch`` module that dethpc does not run (``tensorflow``) is found, and
refuses: ``python -m`` prints why and what to use instead and exits 2, an import raises
ImportError with the same words (``dethpc.launch._determined.refusal``).
Must not: import anything of dethpc's before a name is asked for (``import determined`` is
as cheap as ``import dethpc``), or serve another ``determined.*`` module that dethpc lacks
(that import fails as it would without this alias).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Sequence

#: ``determined.<name>`` modules that live elsewhere in dethpc (``det.errors``,
#: ``det.util``); every other ``determined.X`` is ``dethpc.X``
RENAMED = {"determined.errors": "dethpc.common.errors",
           "determined.util": "dethpc.common.util"}
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def target(fullname: str) -> str:
    """The dethpc module that ``determined.<...>`` names."""
    for alias, real in RENAMED.items():
        if fullname == alias or fullname.startswith(alias + "."):
            return real + fullname[len(alias):]
    return "dethpc" + fullname[len("determined"):]


class _AliasLoader(importlib.abc.Loader):
    """Loads ``determined.X`` as the module object ``dethpc.X`` (imported once, shared);
    under ``python -m`` runs dethpc's module's code as ``__main__``."""

    def __init__(self, real: str, real_spec: importlib.machinery.ModuleSpec) -> None:
        self.real = real
        self.real_spec = real_spec
        self.own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self.real)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run (``create_module`` returned the loaded dethpc module): give it
        back its own ``__spec__``, which the import system replaced with the alias's."""
        module.__spec__ = self.own_spec

    def get_code(self, fullname: str) -> types.CodeType | None:
        """For ``runpy`` (``python -m determined.launch.torch_distributed``)."""
        loader = self.real_spec.loader
        get_code = getattr(loader, "get_code", None)
        return None if get_code is None else get_code(self.real)  # type: ignore[no-any-return]

    def is_package(self, fullname: str) -> bool:
        return self.real_spec.submodule_search_locations is not None


class _RefusedLoader(importlib.abc.Loader):
    """A ``determined.launch`` module dethpc does not run: its refusal, as a program
    (``python -m``: the message on stderr, exit 2) or as an import (ImportError)."""

    def __init__(self, message: str) -> None:
        self.message = message

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        raise ImportError(self.message, name=module.__name__)

    def get_code(self, fullname: str) -> types.CodeType:
        return compile(f"import sys\nprint({self.message!r}, file=sys.stderr)\n"
                       "raise SystemExit(2)\n", f"<{fullname}: refused by dethpc>", "exec")

    def is_package(self, fullname: str) -> bool:
        return False


def _refused(fullname: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of a ``determined.launch.<name>`` that dethpc refuses, else None."""
    launch = "determined.launch."
    rest = fullname[len(launch):]
    if not fullname.startswith(launch) or not rest or "." in rest:
        return None
    from dethpc.launch._determined import REFUSED, refusal

    message = refusal(fullname)
    if rest not in REFUSED or message is None:
        return None
    return importlib.util.spec_from_loader(fullname, _RefusedLoader(message))


class _AliasFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: every ``determined.*`` import goes to dethpc's module."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target_module: types.ModuleType | None = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("determined."):
            return None
        real = target(fullname)
        try:
            real_spec = importlib.util.find_spec(real)
        except ModuleNotFoundError:
            return _refused(fullname)
        if real_spec is None:
            return _refused(fullname)
        package = real_spec.submodule_search_locations is not None
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(real, real_spec), origin=real_spec.origin,
            is_package=package)


def _real_determined() -> importlib.machinery.ModuleSpec | None:
    """A real Determined on ``sys.path`` other than this alias, if one is installed."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    return importlib.machinery.PathFinder.find_spec("determined", rest)


def _install() -> None:
    real = _real_determined()
    if real is not None and real.loader is not None:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
        module = importlib.util.module_from_spec(real)
        sys.modules["determined"] = module
        real.loader.exec_module(module)
        return
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
    sys.modules["determined"] = importlib.import_module("dethpc")


_install()
