"""The state database: sqlmodel tables and the ``Store`` seam."""

from dethpc.store.store import Store

__all__ = ["Store"]
