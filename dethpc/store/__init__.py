"""The state database: sqlmodel tables and the ``Store`` seam.

Owns: the schema (``models``), the ``Store`` (every read and write of dethpc state),
its migrations (``migrations``), SQLite settings (``sqlite``), who may see what
(``access``), which database a user opens (``credentials``) and, without SQLAlchemy, a
new experiment's rows (``new_experiment``) and a ``dethpc sbatch`` job's (``sbatch_rows``).
Must not: hold decisions (the control plane makes them) or import the job side.

``Store`` is loaded on first use (PEP 562): importing a light module of this package
(``location``, ``sqlite``, ``new_experiment``, ``sbatch_rows``) does not import SQLAlchemy
(issue 47).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dethpc.store.store import Store

__all__ = ["Store"]


def __getattr__(name: str) -> Any:
    if name == "Store":
        from dethpc.store.store import Store

        return Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
