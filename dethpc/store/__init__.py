"""The state database: sqlmodel tables and the ``Store`` seam.

Owns: the schema (``models``), the ``Store`` (every read and write of dethpc state),
its migrations (``migrations``), SQLite settings (``sqlite``), who may see what
(``access``) and which database a user opens (``credentials``).
Must not: hold decisions (the control plane makes them) or import the job side.
"""

from dethpc.store.store import Store

__all__ = ["Store"]
