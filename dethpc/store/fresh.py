"""An empty SQLite database created at the head revision directly (issue 47).

Owns: ``create_at_head(conn, head)``: the live models' tables and indexes
(``SQLModel.metadata.create_all``) and ``alembic_version`` holding ``head``, as Alembic
writes that table, on the caller's connection inside its write transaction (it commits).
The result is the schema the migration chain gives, but for the order of the columns
that later revisions added (tests/unit/store/test_store_migrations.py compares both with
the models); a fresh home's first command thus runs no revision and imports no Alembic
(0.3-1 s here before).
Must not: be used for PostgreSQL (revision 0006's roles, grants and row-level security
policies are not in the models: the chain creates those) or for a database that holds
anything (``migrations.upgrade_to_head`` checks).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection


def create_at_head(conn: Connection, head: str) -> None:
    from sqlmodel import SQLModel

    import dethpc.store.models  # noqa: F401  (the tables SQLModel.metadata holds)

    SQLModel.metadata.create_all(conn)
    # alembic_version exactly as Alembic creates it (alembic.runtime.migration)
    conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
                      "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"))
    conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:head)"),
                 {"head": head})
