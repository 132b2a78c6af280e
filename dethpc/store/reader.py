"""The state database read with the standard library's ``sqlite3``: no ORM (issue 47).

Owns: ``Reader.open(path)`` (a SQLite store whose schema is at ``HEAD_REVISION``, or None)
and the few reads the commands that only look need (``dethpc experiment list``,
``experiment describe``, ``trial logs``): rows as attribute objects whose names, enum
states and decoded JSON values are those of the ``dethpc.store.models`` tables, so one
view function (``dethpc.surfaces.views``) turns either kind of row into the same dict.
All reads of one ``Reader`` see one snapshot (one read transaction).

Why: SQLAlchemy, sqlmodel and pydantic were about half of such a command's imports
(0.5 s of 1.2 s under load, bench/cli); these reads are a handful of ``SELECT``s.

The schema check is one ``SELECT`` of ``alembic_version`` against ``HEAD_REVISION``, a
constant (``dethpc.store.revision``; tests/unit/store/test_store_reader.py checks it
against the revision scripts):
anything else -- no file, an empty or older database, a newer one, an unreadable one --
answers None, and the caller takes the ORM path (``dethpc.store.Store``), which creates,
migrates or says what is wrong, as it always has.
Must not: write (not even a pragma that changes the file), import SQLAlchemy, sqlmodel,
pydantic or Alembic, or serve PostgreSQL (a shared database's row-level security and roles
are the ORM path's).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

from dethpc.backends.base import JobState
from dethpc.common.kinds import ExperimentKind
from dethpc.store.revision import HEAD_REVISION
from dethpc.store.sqlite import busy_timeout_s
from dethpc.store.states import CheckpointState, ExperimentState, TrialState

__all__ = ["HEAD_REVISION", "Reader"]

#: per table, how a column's stored value becomes the model's (JSON text, enums, booleans)
_JSON = json.loads
_CONVERT: dict[str, dict[str, Any]] = {
    "experiment": {"labels": _JSON, "state": ExperimentState, "kind": ExperimentKind},
    "trial": {"hparams": _JSON, "validate_at": _JSON, "meta": _JSON, "state": TrialState,
              "needs_job": bool},
    "job": {"state": JobState, "live": bool, "cancel_due": bool},
    "checkpoint": {"meta": _JSON, "state": CheckpointState},
    "searcherstate": {"snapshot": _JSON, "initialized": bool, "shutdown": bool},
    "daemonlease": {},
}


class Reader:
    """One read transaction on one SQLite store at ``HEAD_REVISION``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @classmethod
    def open(cls, path: Path) -> Reader | None:
        """The store at ``path`` when it exists and is at ``HEAD_REVISION``; else None."""
        if not path.is_file():
            return None                 # the ORM path creates it (at head)
        conn: sqlite3.Connection | None = None
        try:
            # mode=rw: never creates the file; isolation_level None: our own BEGIN
            conn = sqlite3.connect(f"file:{quote(str(path))}?mode=rw", uri=True,
                                   timeout=busy_timeout_s(), isolation_level=None)
            conn.execute("BEGIN")       # one snapshot for every read below
            stored = {r[0] for r in conn.execute("SELECT version_num FROM alembic_version")}
        except sqlite3.Error:
            if conn is not None:
                conn.close()
            return None                 # no revision table, locked, not a database...
        if stored != {HEAD_REVISION}:
            conn.close()
            return None                 # older: migrated by the ORM path; newer: refused
        return cls(conn)

    def close(self) -> None:
        self.conn.close()

    def _rows(self, table: str, where: str = "", params: tuple[Any, ...] = (),
              order: str = "") -> list[Any]:
        sql = f"SELECT * FROM {table}"  # noqa: S608 - table, where, order: our constants
        if where:
            sql += f" WHERE {where}"
        if order:
            sql += f" ORDER BY {order}"
        cur = self.conn.execute(sql, params)
        names = [d[0] for d in cur.description]
        convert = _CONVERT[table]
        out = []
        for row in cur:
            values = dict(zip(names, row, strict=True))
            for name, fn in convert.items():
                if values.get(name) is not None:
                    values[name] = fn(values[name])
            out.append(SimpleNamespace(**values))
        return out

    def _one(self, table: str, where: str, params: tuple[Any, ...]) -> Any | None:
        rows = self._rows(table, where, params)
        return rows[0] if rows else None

    def experiments(self) -> list[Any]:
        return self._rows("experiment", order="id")

    def experiment(self, exp_id: int) -> Any | None:
        return self._one("experiment", "id = ?", (exp_id,))

    def trials_of(self, exp_id: int) -> list[Any]:
        return self._rows("trial", "experiment_id = ?", (exp_id,), "id")

    def trial(self, trial_id: int) -> Any | None:
        return self._one("trial", "id = ?", (trial_id,))

    def checkpoints_of(self, exp_id: int) -> list[Any]:
        return self._rows("checkpoint", "experiment_id = ?", (exp_id,))

    def searcher_state(self, exp_id: int) -> Any | None:
        return self._one("searcherstate", "experiment_id = ?", (exp_id,))

    def live_jobs(self, exp_id: int) -> list[Any]:
        return self._rows("job", "experiment_id = ? AND live = 1", (exp_id,), "id")

    def ended_jobs_on_nodes(self, exp_id: int) -> list[Any]:
        """The experiment's ended jobs that name their nodes (``bad_nodes.excluded``'s)."""
        return self._rows("job", "experiment_id = ? AND ended_at IS NOT NULL AND nodes != ''",
                          (exp_id,))

    def daemon_lease(self, owner: str) -> Any | None:
        return self._one("daemonlease", "owner = ?", (owner,))
