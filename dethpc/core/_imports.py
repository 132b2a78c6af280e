"""Determined's ``det.import_from_path``: import modules from a directory, then forget them.

Owns: ``import_from_path(path)``, a context manager inside which ``import name`` finds
``name`` in ``path`` first, even when a module of that name is already imported (say
the current ``model_def`` and the one saved with an old checkpoint). Leaving it drops
the modules imported from ``path`` from ``sys.modules`` (the objects the caller holds
keep working) and puts back what it had set aside, and ``sys.path`` as it was.
Must not: be nested or used from two threads at once (it changes the interpreter's
import state; a second entry is refused with a clear error), or touch files.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from dethpc.common.errors import DethpcError

_BUSY = threading.Lock()


def _top_level_names(root: Path) -> set[str]:
    """The module and package names ``root`` offers (``x.py``, ``x/``, ``x.so``...)."""
    names: set[str] = set()
    try:
        entries = list(root.iterdir())
    except OSError:
        return names
    for entry in entries:
        if entry.is_dir() and entry.name.isidentifier():
            names.add(entry.name)
        elif entry.suffix in (".py", ".pyc", ".so", ".pyd"):
            stem = entry.name.split(".", 1)[0]
            if stem.isidentifier():
                names.add(stem)
    return names


def _is_under(module: object, root: Path) -> bool:
    origin = getattr(module, "__file__", None)
    if not origin:
        return False
    try:
        return Path(origin).resolve().is_relative_to(root)
    except (OSError, ValueError):
        return False


def _owned(names: set[str], key: str) -> bool:
    return key.split(".", 1)[0] in names


@contextlib.contextmanager
def import_from_path(path: str | os.PathLike[str]) -> Iterator[None]:
    """Import from ``path`` inside the block, as Determined's ``det.import_from_path``."""
    if not _BUSY.acquire(blocking=False):
        raise DethpcError("import_from_path() is already in use: it cannot be nested or "
                          "used from two threads at once")
    try:
        root = Path(os.fspath(path)).resolve()
        names = _top_level_names(root)
        set_aside = {k: m for k, m in sys.modules.items() if _owned(names, k)}
        for key in set_aside:
            del sys.modules[key]
        before = set(sys.modules)
        old_path = list(sys.path)
        sys.path.insert(0, str(root))
        importlib.invalidate_caches()
        try:
            yield
        finally:
            sys.path[:] = old_path
            for key, module in list(sys.modules.items()):
                if key not in before and (_owned(names, key) or _is_under(module, root)):
                    del sys.modules[key]
            sys.modules.update(set_aside)
    finally:
        _BUSY.release()
