"""The database seam: every read and write of dethpc state goes through ``Store``.

Owns: engine creation (SQLite file on local disk by default, any SQLAlchemy
URL such as ``postgresql+psycopg://...``), bringing the schema to this dethpc's
revision on open (``dethpc.store.migrations``: one query when it is current,
an Alembic upgrade under a lock when it is not), short transactions
(``with store.session() as s``), the reads of one daemon tick in one session
(``with store.tick(): ... with store.read() as s``), and who the connection is
(``store.role``: on a shared PostgreSQL database the rows it sees are the role's own,
see ``dethpc.store.access``).
Must not: contain scheduling logic; the daemon and CLI decide, the store keeps.

SQLite runs in WAL mode where the file is on a local filesystem, in the rollback-journal
mode elsewhere (WAL needs shared memory and is unsafe on NFS, where a login node's home
often lives); ``synchronous=FULL`` in both (``dethpc.store.sqlite``).
"""

from __future__ import annotations

import contextlib
import threading
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
    """Owns one engine; hands out short sessions.

    ``read()`` is a session for a phase that only reads. Outside ``tick()`` it is
    ``session()``. Inside ``tick()`` (the daemon's tick, on the thread that entered
    it), the tick's reads share one session and its one transaction (issue 47 item 2:
    ~11 short read transactions a tick were a tenth of the daemon's CPU). What keeps
    that as safe as a session per phase:

    - a read block's objects are detached at its end (``expunge_all``), as a closed
      session's are, so the next block's queries load fresh rows, never an earlier
      block's identity map;
    - SQLite's driver begins no transaction for a ``SELECT`` (pysqlite's default), so
      the shared session holds no lock between statements and each statement sees
      every commit before it -- the write phases' included; on PostgreSQL it is one
      READ COMMITTED transaction, whose statements do the same and take no row locks;
    - a block that did write (an object changed or added, or a flush) is committed at
      its end, where ``session()`` would have committed it: durable before the side
      effects after the block, as before;
    - an error in a block rolls back and drops the shared session; the next read opens
      another. ``tick()``'s end closes it (no transaction stays open between ticks).
    """

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
        #: the tick's shared read session (``read()``), the thread in ``tick()``
        self._reader: Session | None = None
        self._reader_depth = 0
        self._reader_wrote = False
        self._tick_thread: int | None = None
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
    def tick(self) -> Iterator[None]:
        """Scope of one daemon tick: its ``read()`` blocks share one session (this thread's)."""
        if self._tick_thread is not None:       # nested: the outer scope owns it
            yield
            return
        self._tick_thread = threading.get_ident()
        try:
            yield
        finally:
            self._tick_thread = None
            self._drop_reader()

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads: the tick's shared one inside ``tick()``, else ``session()``."""
        if self._tick_thread != threading.get_ident():
            with self.session() as own:
                yield own
            return
        s = self._reader
        if s is None:
            s = self._reader = Session(self.engine, expire_on_commit=False)
            self._reader_wrote = False
            event.listen(s, "after_flush", self._reader_flushed)
        self._reader_depth += 1
        try:
            yield s
            if self._reader_depth == 1 and (
                    s.new or s.dirty or s.deleted or self._reader_wrote):
                s.commit()                      # where session() would have committed
                self._reader_wrote = False
        except BaseException:
            self._reader_depth -= 1
            if self._reader_depth == 0:         # rolled back and dropped; the next opens anew
                self._drop_reader()
            raise
        self._reader_depth -= 1
        if self._reader_depth == 0:
            s.expunge_all()                     # detached, as a closed session's objects

    def _reader_flushed(self, _session: Session, _context: object) -> None:
        self._reader_wrote = True

    def _drop_reader(self) -> None:
        s, self._reader, self._reader_depth = self._reader, None, 0
        if s is not None:
            try:
                s.rollback()
            finally:
                s.close()

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


