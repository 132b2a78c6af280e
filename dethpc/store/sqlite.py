"""SQLite connection settings, shared by the store and its migrations.

Owns: how long a writer waits for another process's lock (``busy_timeout_s``,
``DETHPC_DB_BUSY_TIMEOUT_S``) and the pragmas every SQLite connection gets
(``sqlite_pragmas``).
Must not: open a database or know the schema.
"""

from __future__ import annotations

import os


def busy_timeout_s() -> float:
    """How long a writer waits for another process's lock on an SQLite database before it
    reports (``DETHPC_DB_BUSY_TIMEOUT_S``, default 30 s)."""
    try:
        return max(0.1, float(os.environ.get("DETHPC_DB_BUSY_TIMEOUT_S", "30")))
    except ValueError:
        return 30.0


def sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s() * 1000)}")
    cur.close()
