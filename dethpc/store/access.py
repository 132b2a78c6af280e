"""Who the database lets this process see: the database's side of multi-user isolation.

A SQLite database is one user's file in their 0700 ``DETHPC_HOME``: every row in it is
theirs. A PostgreSQL database may be shared by a site's users (migration 0006): each user
connects as their own login role, named as their Unix user, and row-level security
shows a member of ``dethpc_users`` only the rows of its own experiments; a member of
``dethpc_admin`` (or a superuser) sees and may change every row.

Owns: ``Scope`` and ``DatabaseRole`` (what the connected role may see, read once per
``Store``), ``role_of(engine)``, the rule that a normal role's name is the Unix user's
(``check_identity``), and redacting a database URL for messages (``safe_url``).
Must not: grant, create roles or decide what a command prints (``dethpc.surfaces.admin.dbusers``
and the CLI do).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError

from dethpc.common.errors import DethpcError

#: the group role whose members see and may change every user's rows (migration 0006)
ADMIN_ROLE = "dethpc_admin"
#: the group role whose members may use dethpc's tables (their own rows)
USERS_ROLE = "dethpc_users"


class Scope(StrEnum):
    """Whose rows the connected database session sees."""

    #: SQLite in the user's own home: every row is the user's
    PRIVATE_DATABASE = "private-database"
    #: a shared PostgreSQL, a ``dethpc_users`` role: row-level security shows its own rows
    OWN_ROWS = "own-rows"
    #: a shared PostgreSQL, a ``dethpc_admin`` member or a superuser: every user's rows
    ALL_ROWS = "all-rows"


@dataclass(frozen=True)
class DatabaseRole:
    #: the database role this process connected as ("" for SQLite)
    name: str
    scope: Scope

    @property
    def shared(self) -> bool:
        """The database is shared by several users (each daemon acts on its own rows)."""
        return self.scope is not Scope.PRIVATE_DATABASE


def role_of(engine: Engine) -> DatabaseRole:
    """The connected role and what it sees (one query on PostgreSQL, none on SQLite)."""
    if engine.dialect.name != "postgresql":
        return DatabaseRole("", Scope.PRIVATE_DATABASE)
    with engine.connect() as conn:
        name, admin = conn.execute(text(
            "SELECT current_user::text, r.rolsuper OR r.rolbypassrls OR EXISTS ("
            "SELECT 1 FROM pg_roles a WHERE a.rolname = :admin "
            "AND pg_has_role(current_user, a.oid, 'MEMBER')) "
            "FROM pg_roles r WHERE r.rolname = current_user"), {"admin": ADMIN_ROLE}).one()
    return DatabaseRole(str(name), Scope.ALL_ROWS if admin else Scope.OWN_ROWS)


def check_identity(role: DatabaseRole, unix_user: str, where: str) -> None:
    """A normal role must be named as the Unix user running dethpc: experiments are owned
    by the Unix user (whose Slurm jobs and run directories they are), and the database
    accepts only rows owned by the connected role. Admins are not held to it."""
    if role.scope is Scope.OWN_ROWS and role.name != unix_user:
        raise DethpcError(
            f"you run as Unix user {unix_user!r} but connect to database {where} as role "
            f"{role.name!r}: dethpc maps each Unix user to the database role of the same "
            "name; use your own credentials (docs/admin.md, 'A shared PostgreSQL database')")


def safe_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<a database URL that does not parse>"
