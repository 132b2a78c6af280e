"""Login roles of a shared PostgreSQL database for dethpc's users (``dethpc admin db``).

Each user connects as their own login role, named as their Unix user; migration 0006
makes the database show a member of ``dethpc_users`` only its own rows, and a member of
``dethpc_admin`` every row. ``add_user`` creates (or, asked to, re-keys) such a role:
the password is generated here and sent to the server only as a SCRAM-SHA-256 verifier
computed by libpq on this side, so it is in no server log; it reaches the user as a
database URL in a credentials file that only its owner may read (created ``0600``
before the role exists, so that a file that cannot be created leaves no role behind).
A site whose ``pg_hba.conf`` authenticates by peer, certificate or GSSAPI asks for no
password and gets no file.

Owns: the user-name rule, the role's DDL, the credentials URL and file.
Must not: print or log a password; decide who may add users (the database does: the
connected role needs ``CREATEROLE``, or is a superuser).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from dethpc.common.errors import ConfigError, DethpcError, FieldError
from dethpc.store import Store
from dethpc.store.access import ADMIN_ROLE, USERS_ROLE

#: a Unix user name that is also a safe role name (quoted anyway)
USER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,62}$")
_RESERVED = (USERS_ROLE, ADMIN_ROLE, "public")


@dataclass(frozen=True)
class AddedUser:
    name: str
    admin: bool
    #: the role existed and got a new password (``replace``)
    replaced: bool
    #: the credentials file written; None when no password was asked for
    credentials: Path | None
    #: the Unix user the file was given to (when run as root), else None
    file_owner: str | None


def check_user_name(name: str) -> None:
    if not USER_NAME.match(name) or name in _RESERVED or name.startswith("pg_"):
        raise ConfigError([FieldError("NAME", f"{name!r} is not a user name dethpc gives a "
                                      "role: allowed are letters, digits, _ . - (first a "
                                      "letter or _), at most 63, not pg_*, dethpc_users, "
                                      "dethpc_admin or public")],
                          source="dethpc admin db add-user")


def add_user(store: Store, name: str, *, admin: bool, password: bool, replace: bool,
             credentials: Path) -> AddedUser:
    """Create login role ``name`` (member of ``dethpc_users``, and of ``dethpc_admin``
    with ``admin``); with ``password``, write its URL to ``credentials``."""
    check_user_name(name)
    if store.engine.dialect.name != "postgresql":
        raise DethpcError(f"database {store.safe_url} is not PostgreSQL: database roles are "
                          "for a database the site's users share (database_url); a SQLite "
                          "database is one user's file in their DETHPC_HOME")
    secret = secrets.token_urlsafe(32) if password else None
    with _exclusive_file(credentials if password else None) as out:
        try:
            with store.engine.connect() as conn:
                existed = _role_exists(conn, name)
                if existed and not replace:
                    raise DethpcError(f"database role {name!r} exists; --new-password gives "
                                      "it a new password (and a new credentials file)")
                conn.exec_driver_sql(_role_sql(conn, name, secret, create=not existed))
                for group in (USERS_ROLE, *((ADMIN_ROLE,) if admin else ())):
                    conn.exec_driver_sql(_grant_sql(conn, group, name))
                conn.commit()
        except DBAPIError as exc:
            raise DethpcError(f"database {store.safe_url} refused to set up role {name!r}: "
                              f"{str(exc.orig).strip()}; nothing was changed") from None
        owner = None
        if out is not None and secret is not None:
            url = store.engine.url.set(username=name, password=secret)
            os.write(out, (url.render_as_string(hide_password=False) + "\n").encode())
            owner = _give_to(out, name)
    return AddedUser(name=name, admin=admin, replaced=existed,
                     credentials=credentials if password else None, file_owner=owner)


def _role_exists(conn: Connection, name: str) -> bool:
    return conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :n"),
                        {"n": name}).first() is not None


def _role_sql(conn: Connection, name: str, secret: str | None, *, create: bool) -> str:
    from psycopg import sql

    pg = _driver(conn)
    verb = "CREATE ROLE {} LOGIN" if create else "ALTER ROLE {} LOGIN"
    if secret is None:
        return sql.SQL(verb).format(sql.Identifier(name)).as_string(pg)
    # libpq computes the SCRAM verifier: the clear password never reaches the server
    verifier = pg.pgconn.encrypt_password(secret.encode(), name.encode(), b"scram-sha-256")
    return sql.SQL(verb + " PASSWORD {}").format(
        sql.Identifier(name), sql.Literal(verifier.decode())).as_string(pg)


def _grant_sql(conn: Connection, group: str, name: str) -> str:
    from psycopg import sql

    return sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(name)
                                            ).as_string(_driver(conn))


def _driver(conn: Connection) -> Any:
    """psycopg's own connection under SQLAlchemy's (for quoting and libpq)."""
    pg = conn.connection.driver_connection
    assert pg is not None
    return pg


@contextlib.contextmanager
def _exclusive_file(path: Path | None) -> Iterator[int | None]:
    """A new file, ``0600`` whatever the umask, never through a link; removed when the
    body fails (a role without its credentials would be useless)."""
    if path is None:
        yield None
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise DethpcError(f"{path} exists; dethpc does not overwrite a credentials file: "
                          "remove it or give another --credentials-file") from None
    except OSError as exc:
        raise DethpcError(f"cannot create the credentials file {path}: "
                          f"{exc.strerror or exc}") from None
    ok = False
    try:
        os.fchmod(fd, 0o600)
        yield fd
        ok = True
    finally:
        os.close(fd)
        if not ok:
            path.unlink(missing_ok=True)


def _give_to(fd: int, name: str) -> str | None:
    """Run as root, and ``name`` a Unix user: the file becomes theirs (still 0600)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    os.fchown(fd, entry.pw_uid, entry.pw_gid)
    return name
