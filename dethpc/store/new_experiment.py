"""A new experiment's rows written with the standard library's ``sqlite3`` alone.

Owns: ``SqliteAtHead`` (an SQLite store file that exists and is at this dethpc's schema
revision, opened with ``sqlite3`` and the store's own connection settings,
``dethpc.store.sqlite``) and its ``insert_experiment``: the experiment, its searcher
state and its ``created`` event in one transaction, the same rows as the models write
(``tests/unit/store/test_new_experiment_rows.py`` compares the two paths column by column),
and the row writers ``dethpc.store.sbatch_rows`` shares (``transaction``,
``insert_experiment_row``, ``insert_searcher_state``, ``insert_event``).

Why (issue 47 item 1): ``dethpc submit`` should answer in <= 0.5 s, and SQLAlchemy with
sqlmodel and the models cost ~0.45 s of imports on an idle login node. Anything else
(PostgreSQL, a database to create or upgrade, a missing file) answers ``None`` from
``SqliteAtHead.open`` and goes through ``Store``.
Must not: import SQLAlchemy, sqlmodel or the models, create or migrate a schema, or
write any other row (a ``dethpc sbatch`` job's batch, trials and jobs are
``sbatch_rows``').
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dethpc.store.location import sqlite_path
from dethpc.store.revision import HEAD_REVISION
from dethpc.store.sqlite import busy_timeout_s, settings_for

# the models' defaults (dethpc.store.models): ExperimentState.ACTIVE, the JSON encoding
# SQLAlchemy's JSON type writes (json.dumps; an event's data None is JSON 'null', not SQL
# NULL), booleans as 0/1
_ACTIVE = "ACTIVE"


@dataclass(frozen=True)
class NewExperiment:
    """The columns of a new ``experiment`` row that its creator chooses."""

    name: str
    config_yaml: str
    owner: str
    backend: str
    kind: str
    description: str = ""
    labels: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SqliteAtHead:
    """An SQLite store file at this dethpc's head revision."""

    path: Path

    @classmethod
    def open(cls, url: str) -> SqliteAtHead | None:
        """The store at ``url`` when it is an existing SQLite file at head, else None
        (the caller opens ``Store``, which creates, upgrades or reports)."""
        path = sqlite_path(url)
        if path is None or not path.is_file():
            return None
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=busy_timeout_s())
            try:
                stored = {r[0] for r in conn.execute("SELECT version_num FROM alembic_version")}
            finally:
                conn.close()
        except sqlite3.Error as exc:
            if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise   # held by another process past the busy timeout: said as the Store's
            return None   # not a dethpc database at head: the Store says what it is
        return cls(path) if stored == {HEAD_REVISION} else None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=busy_timeout_s(), isolation_level=None)
        settings_for(self.path).apply(conn, None)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One connection in one transaction: committed when the block ends, rolled back
        when it raises (``dethpc.store.sbatch_rows`` writes its rows through it too)."""
        conn = self._connect()
        try:
            conn.execute("BEGIN")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        finally:
            conn.close()

    def insert_experiment(self, row: NewExperiment, place: Callable[[int], str],
                          event_kind: str, event_message: str) -> int:
        """Insert the experiment, then ``place(id)`` (the caller puts its run directory
        in place and answers its path, stored as ``run_dir``), its searcher state and its
        event; one transaction, committed only when ``place`` returned. Returns the id."""
        with self.transaction() as conn:
            exp_id = insert_experiment_row(conn, row)
            conn.execute("UPDATE experiment SET run_dir = ? WHERE id = ?",
                         (place(exp_id), exp_id))
            insert_searcher_state(conn, exp_id)
            insert_event(conn, exp_id, event_kind, event_message)
        return exp_id


def insert_experiment_row(conn: sqlite3.Connection, row: NewExperiment) -> int:
    """The ``experiment`` row (``run_dir`` empty, for the caller to set): its id."""
    cur = conn.execute(
        "INSERT INTO experiment (name, description, labels, state, config_yaml, "
        "run_dir, owner, backend, kind, progress, created_at, ended_at, message)"
        " VALUES (?, ?, ?, ?, ?, '', ?, ?, ?, 0.0, ?, NULL, '')",
        (row.name, row.description, json.dumps(list(row.labels)), _ACTIVE,
         row.config_yaml, row.owner, row.backend, row.kind, time.time()))
    if cur.lastrowid is None:   # pragma: no cover - an INSERT always has one
        raise sqlite3.DatabaseError("no id for the new experiment")
    return cur.lastrowid


def insert_searcher_state(conn: sqlite3.Connection, exp_id: int, *,
                          initialized: bool = False, shutdown: bool = False) -> None:
    """The experiment's ``searcherstate`` row, its snapshot empty."""
    conn.execute("INSERT INTO searcherstate (experiment_id, snapshot, initialized, shutdown)"
                 " VALUES (?, '{}', ?, ?)", (exp_id, int(initialized), int(shutdown)))


def insert_event(conn: sqlite3.Connection, exp_id: int, kind: str, message: str) -> None:
    """An experiment's ``event`` row (no trial, its data JSON ``null`` as the models')."""
    conn.execute("INSERT INTO event (experiment_id, trial_id, kind, message, time, data)"
                 " VALUES (?, NULL, ?, ?, ?, 'null')", (exp_id, kind, message, time.time()))
