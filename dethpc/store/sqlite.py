"""SQLite connection settings, shared by the store and its migrations.

Owns: how long a writer waits for another process's lock (``busy_timeout_s``,
``DETHPC_DB_BUSY_TIMEOUT_S``), the journal mode and ``synchronous`` level a database file
gets (``SqliteSettings.for_file``: WAL only on a filesystem known to be local) and the
pragmas every SQLite connection gets (``SqliteSettings.apply``, a ``connect`` listener).
Must not: open a database itself or know the schema.

Why WAL where the file is local (issue 47 item 2): in the default rollback-journal mode
every write transaction creates, fsyncs and deletes ``dethpc.db-journal`` and fsyncs the
database (the daemon commits a few times per tick: measured in
``bench/results/daemon_cost.json``), and a reader waits while a writer commits. In WAL mode a
commit appends to ``dethpc.db-wal`` (one fsync with ``synchronous=FULL``), readers (every
CLI view) never block the daemon nor it them, and the busy timeout covers writer against
writer. WAL needs shared memory (the ``-shm`` file, mmap'd) that every process opening
the database must see: on NFS, Lustre or GPFS two login nodes would not share it and the
database can be corrupted (https://www.sqlite.org/wal.html), so a file on a network
filesystem, or on one that cannot be told (no mount table), keeps the rollback journal.

``synchronous=FULL`` in both modes: a commit is on disk when it returns, so a power loss
or kernel crash of the login node loses no committed transaction (the submission
protocol's batch recorded before ``sbatch``, ``dethpc.control.submission``, stays on
disk); WAL's ``NORMAL`` would save one fsync per commit but may lose the last commits on
power loss (measured beside the others; not worth the contract).

Overrides for an admin (and the bench): ``DETHPC_SQLITE_JOURNAL`` (``wal``/``delete``;
``wal`` is still refused on a network filesystem) and ``DETHPC_SQLITE_SYNCHRONOUS``
(``full``/``normal``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dethpc.common.jobenv import ENV_SQLITE_JOURNAL, ENV_SQLITE_SYNCHRONOUS

JOURNALS = ("wal", "delete")
SYNCHRONOUS = ("full", "normal")


def busy_timeout_s() -> float:
    """How long a writer waits for another process's lock on an SQLite database before it
    reports (``DETHPC_DB_BUSY_TIMEOUT_S``, default 30 s)."""
    try:
        return max(0.1, float(os.environ.get("DETHPC_DB_BUSY_TIMEOUT_S", "30")))
    except ValueError:
        return 30.0


@dataclass(frozen=True)
class SqliteSettings:
    """The journal mode and ``synchronous`` level of one database file."""

    journal: str = "delete"
    synchronous: str = "full"

    @classmethod
    def for_file(cls, local: bool | None) -> SqliteSettings:
        """``local``: True when the file's filesystem is known to be local (``location``:
        ``StoreLocation.safe``), False on a network filesystem, None when unknown."""
        journal = os.environ.get(ENV_SQLITE_JOURNAL, "").strip().lower()
        if journal not in JOURNALS:
            journal = "wal" if local is True else "delete"
        elif journal == "wal" and local is not True:
            journal = "delete"          # WAL's shared memory is unsafe off a local disk
        sync = os.environ.get(ENV_SQLITE_SYNCHRONOUS, "").strip().lower()
        return cls(journal, sync if sync in SYNCHRONOUS else "full")

    def apply(self, dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
        """A ``connect`` listener: every connection's pragmas; the journal mode is set
        only when the file's differs (it is a property of the file: switching needs the
        database to itself, so a switch another process blocks is left to a later
        connection)."""
        cur = dbapi_conn.cursor()
        try:
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s() * 1000)}")
            row = cur.execute("PRAGMA journal_mode").fetchone()
            if row is not None and str(row[0]).lower() != self.journal:
                try:
                    cur.execute(f"PRAGMA journal_mode={self.journal}")
                except Exception as exc:  # noqa: BLE001 - sqlite3.OperationalError: busy
                    import logging  # here: the read commands open no connection with it

                    logging.getLogger(__name__).info("SQLite journal mode stays %s (%s)",
                                                     row[0], exc)
            cur.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
        finally:
            cur.close()


def sqlite_pragmas(dbapi_conn, record) -> None:  # type: ignore[no-untyped-def]
    """The rollback-journal settings (a file whose filesystem is not told)."""
    SqliteSettings().apply(dbapi_conn, record)


def settings_for(path: Path) -> SqliteSettings:
    """The settings for the SQLite file at ``path`` (one read of the mount table)."""
    from dethpc.common.fstype import filesystem_of

    mount = filesystem_of(path)
    return SqliteSettings.for_file(None if mount is None else not mount.network)
