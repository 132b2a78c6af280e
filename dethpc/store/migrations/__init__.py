"""Schema migrations of the state database (Alembic), and bringing a database to head.

Owns: the revision scripts in ``versions/`` (file ``NNNN_slug.py`` holds revision ``NNNN``;
one linear chain), Alembic's ``env.py``, and ``upgrade_to_head(engine)``, which
``Store.__init__`` calls on every open:

- at head already: one ``SELECT`` of ``alembic_version``, and Alembic is not even imported;
- otherwise, under a lock (SQLite: ``BEGIN IMMEDIATE``, the whole migration in that
  transaction; PostgreSQL: ``pg_advisory_xact_lock``, and DDL is transactional there too),
  it checks again (a concurrent opener may have migrated meanwhile) and then:
  an empty SQLite database is created at head directly (``dethpc.store.fresh``: the
  models' tables and the head revision stamped, without Alembic: a fresh home's first
  command costs no migration chain, issue 47), an empty PostgreSQL database is upgraded
  from base (revision 0006's roles and policies are not in the models); a pre-Alembic v1
  database (table ``schemainfo``,
  no ``alembic_version``) is stamped ``0001`` and upgraded; a known revision is upgraded;
  a revision this dethpc does not know (a newer dethpc wrote it) is refused.

Alembic is configured in code (no ``alembic.ini``): ``alembic_config(connection)``.
Must not: import the live models (``dethpc.store.models``) in a revision (a revision
describes the schema as it was when it was written) or here but for an empty SQLite
database (``dethpc.store.fresh``).
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from dethpc.common.errors import StoreError

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
VERSIONS = HERE / "versions"
#: the revision that ``Store`` of dethpc <= 3b2ae8d created with ``create_all`` (schemainfo v1)
V1_REVISION = "0001"
#: PostgreSQL advisory lock key held while checking and migrating ("dethpcdb" in ASCII)
PG_LOCK_KEY = 0x6465746870636462
_REVISION_FILE = re.compile(r"^(\d{4})_\w+\.py$")
# tables that only a dethpc database holds (to tell "empty" from "dethpc without revision")
_DETHPC_TABLES = ("experiment", "trial", "job")


@dataclass(frozen=True)
class Migration:
    """What opening the store did to the database."""

    #: the revision the database was at; None: it was empty
    start: str | None
    head: str
    #: it was a pre-Alembic v1 database, stamped ``V1_REVISION`` before upgrading
    stamped_v1: bool = False
    #: it was an empty SQLite database, created at head without the migration chain
    created_at_head: bool = False


def _empty_sqlite(conn: Connection) -> bool:
    """No table, view, index or trigger at all in the SQLite database (checked under the
    write lock: a concurrent opener may have created it meanwhile)."""
    return conn.exec_driver_sql(
        "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").scalar() == 0


@functools.cache
def head_revision() -> str:
    """The newest revision, read from the file names (no import of the scripts)."""
    ids = [m.group(1) for p in VERSIONS.iterdir() if (m := _REVISION_FILE.match(p.name))]
    if not ids:
        raise RuntimeError(f"no revision scripts in {VERSIONS}")
    return max(ids)


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for dethpc's revisions; ``connection`` is what env.py uses."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(HERE))
    # for developers' ``python -m dethpc.store.migrations new``: 0002_add_foo.py
    config.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    config.attributes["connection"] = connection
    return config


def upgrade_to_head(engine: Engine, *, fresh_at_head: bool = True) -> Migration | None:
    """Bring the database to head; None when it was at head already (the cheap path).
    ``fresh_at_head``: an empty SQLite database is created at head directly (False: by
    the migration chain, as PostgreSQL always is; the tests compare the two).

    Raises ``StoreError`` for an unreachable database, a revision this dethpc does not
    know, or a database that is neither empty nor dethpc's."""
    head = head_revision()
    where = engine.url.render_as_string(hide_password=True)
    try:
        with engine.connect() as conn:
            stored = _stored_revisions(conn)
            if stored == {head}:
                return None
            if engine.dialect.name == "postgresql":
                _refuse_without_create(conn, stored, head, where)
    except DBAPIError as exc:
        raise StoreError(f"cannot open database {where}: {exc.orig}") from exc
    return _upgrade_locked(engine, head, where, fresh_at_head)


def _refuse_without_create(conn: Connection, stored: set[str] | None, head: str,
                           where: str) -> None:
    """A role that may not create in the schema (a user of a shared database, migration
    0006) never tries DDL: the schema owner upgrades the database."""
    role, may = conn.execute(text(
        "SELECT current_user::text, has_schema_privilege(current_schema(), 'CREATE')")).one()
    if may:
        return
    at = ", ".join(sorted(stored)) if stored else "none (the database is empty)"
    raise StoreError(
        f"database {where} is at schema revision {at} and this dethpc needs {head}, but "
        f"your role {role!r} may not change the schema: the schema owner upgrades it "
        "(`dethpc admin db upgrade` with the admin's credentials, docs/store.md)")


def _stored_revisions(conn: Connection) -> set[str] | None:
    """The revisions in ``alembic_version``; None without that table (or on any error:
    the locked path looks again and reports what is wrong)."""
    try:
        return set(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())
    except DBAPIError:
        conn.rollback()
        return None


def _upgrade_locked(engine: Engine, head: str, where: str,
                    fresh_at_head: bool = False) -> Migration | None:
    try:
        return _upgrade_locked_unchecked(engine, head, where, fresh_at_head)
    except DBAPIError as exc:
        rolled_back = engine.dialect.name in ("sqlite", "postgresql")
        raise StoreError(
            f"cannot migrate database {where} to schema revision {head}: {exc.orig}"
            + ("; the migration was rolled back, the database is as it was"
               if rolled_back else "")) from exc


def _upgrade_locked_unchecked(engine: Engine, head: str, where: str,
                              fresh_at_head: bool = False) -> Migration | None:
    dialect = engine.dialect.name
    if dialect == "sqlite":
        # Own connection: foreign keys OFF (a batch migration drops and re-creates tables
        # that others reference; SQLite ignores this pragma inside a transaction, so it
        # comes first), then the write lock for the whole check + migration.
        from dethpc.store.sqlite import busy_timeout_s

        lock_engine = create_engine(engine.url, poolclass=NullPool,
                                    connect_args={"timeout": busy_timeout_s()})
        conn = lock_engine.connect()
        try:
            conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            if fresh_at_head and _empty_sqlite(conn):
                from dethpc.store.fresh import create_at_head

                create_at_head(conn, head)
                conn.commit()
                log.info("database %s created at schema revision %s", where, head)
                return Migration(start=None, head=head, created_at_head=True)
            done = _upgrade(conn, head, where)
            violations = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
            if violations:
                raise StoreError(f"migrating {where} left rows whose foreign keys point "
                                 f"nowhere ({violations[:5]}); nothing was changed")
            conn.commit()
            return done
        finally:
            conn.close()
            lock_engine.dispose()
    with engine.connect() as conn:
        if dialect == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_LOCK_KEY})
        done = _upgrade(conn, head, where)
        conn.commit()
        return done


def _upgrade(conn: Connection, head: str, where: str) -> Migration | None:
    """Check and migrate on ``conn``, inside the caller's transaction (it commits)."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    config = alembic_config(conn)
    stored = set(MigrationContext.configure(conn).get_current_heads())
    if stored == {head}:
        return None     # a concurrent opener migrated it while we waited for the lock
    stamped_v1 = False
    start: str | None = None
    if stored:
        known = {s.revision for s in ScriptDirectory.from_config(config).walk_revisions()}
        unknown = sorted(stored - known)
        if unknown:
            raise StoreError(
                f"database {where} is at schema revision {', '.join(unknown)}, which this "
                f"dethpc (schema revision {head}) does not know: a newer dethpc wrote it. "
                "Use that dethpc (or a newer one) with this database, or point DETHPC_HOME "
                "/ database_url at another database")
        start = ", ".join(sorted(stored))
    else:
        tables = set(inspect(conn).get_table_names())
        if "schemainfo" in tables:
            version = conn.execute(text("SELECT version FROM schemainfo")).scalar()
            if version not in (None, 1):
                raise StoreError(
                    f"database {where} has pre-Alembic schema version {version}; only "
                    "version 1 (dethpc <= 3b2ae8d) can be migrated. Point DETHPC_HOME / "
                    "database_url at another database")
            command.stamp(config, V1_REVISION)
            start, stamped_v1 = V1_REVISION, True
        elif tables & set(_DETHPC_TABLES):
            raise StoreError(
                f"database {where} holds dethpc tables ({', '.join(sorted(tables))}) but "
                "no schema revision (neither alembic_version nor schemainfo); it was not "
                "written by a released dethpc. Point DETHPC_HOME / database_url at "
                "another database")
    command.upgrade(config, "head")
    log.info("database %s migrated from %s to schema revision %s%s", where,
             start or "empty", head, " (pre-Alembic v1, stamped)" if stamped_v1 else "")
    return Migration(start=start, head=head, stamped_v1=stamped_v1)
