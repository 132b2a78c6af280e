"""The database seam: every read and write of dethpc state goes through ``Store``.

Owns: engine creation (SQLite file on local disk by default, any SQLAlchemy
URL such as ``postgresql+psycopg://...``), schema creation and the schema
version check, and short transactions (``with store.session() as s``).
Must not: contain scheduling logic; the daemon and CLI decide, the store keeps.

SQLite runs in the default rollback-journal mode, not WAL: WAL needs shared
memory and is unsafe on NFS, where a login node's home often lives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session, SQLModel, create_engine

from dethpc.errors import StoreError
from dethpc.paths import dethpc_home
from dethpc.store import models


def default_url() -> str:
    return f"sqlite:///{dethpc_home() / 'dethpc.db'}"


class Store:
    """Owns one engine; hands out short sessions."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        if self.url.startswith("sqlite:///"):
            Path(self.url.removeprefix("sqlite:///")).expanduser().parent.mkdir(
                parents=True, exist_ok=True)
            self.engine: Engine = create_engine(
                self.url, connect_args={"timeout": 30, "check_same_thread": False})
            event.listen(self.engine, "connect", _sqlite_pragmas)
        else:
            self.engine = create_engine(self.url, pool_pre_ping=True)
        self._init_schema()

    def _init_schema(self) -> None:
        # stop-gap until the Alembic migrations land (helper-5 replaces this)
        try:
            SQLModel.metadata.create_all(self.engine, tables=_tables())
        except OperationalError as exc:
            raise StoreError(f"cannot open database {self.url}: {exc.orig}") from exc

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed on success, rolled back on error."""
        with Session(self.engine, expire_on_commit=False) as s:
            try:
                yield s
                s.commit()
            except Exception:
                s.rollback()
                raise


def _tables() -> list:  # type: ignore[type-arg]
    return [m.__table__ for m in (  # type: ignore[attr-defined,union-attr]
        models.Experiment, models.SearcherState, models.Trial,
        models.Batch, models.Job, models.Checkpoint, models.Metric, models.Event,
        models.IngestOffset)]


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()
