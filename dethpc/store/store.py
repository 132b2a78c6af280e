"""The database seam: every read and write of dethpc state goes through ``Store``.

Owns: engine creation (SQLite file on local disk by default, any SQLAlchemy
URL such as ``postgresql+psycopg://...``), bringing the schema to this dethpc's
revision on open (``dethpc.store.migrations``: one query when it is current,
an Alembic upgrade under a lock when it is not), short transactions
(``with store.session() as s``), and who the connection is (``store.role``: on a shared
PostgreSQL database the rows it sees are the role's own, see ``dethpc.store.access``).
Must not: contain scheduling logic; the daemon and CLI decide, the store keeps.

SQLite runs in WAL mode where the file is on a local filesystem, in the rollback-journal
mode elsewhere (WAL needs shared memory and is unsafe on NFS, where a login node's home
often lives); ``synchronous=FULL`` in both (``dethpc.store.sqlite``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, create_engine

from dethpc.common.paths import make_private_dir
from dethpc.store.access import DatabaseRole, role_of
from dethpc.store.location import default_url
from dethpc.store.migrations import Migration, upgrade_to_head
from dethpc.store.sqlite import busy_timeout_s, settings_for


class Store:
    """Owns one engine; hands out short sessions."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        if self.url.startswith("sqlite:///"):
            path = Path(self.url.removeprefix("sqlite:///")).expanduser()
            make_private_dir(path.parent)
            self.engine: Engine = create_engine(
                self.url, connect_args={"timeout": busy_timeout_s(),
                                        "check_same_thread": False})
            event.listen(self.engine, "connect", settings_for(path).apply)
        else:
            self.engine = create_engine(self.url, pool_pre_ping=True)
        #: what opening did to the schema; None when it was current already
        self.migration: Migration | None = upgrade_to_head(self.engine)

    @property
    def safe_url(self) -> str:
        """The URL for messages and logs: its password replaced by ``***``."""
        return self.engine.url.render_as_string(hide_password=True)

    @cached_property
    def role(self) -> DatabaseRole:
        """The database role connected and whose rows it sees (read once)."""
        return role_of(self.engine)

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


