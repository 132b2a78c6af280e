"""Which database URL this user's dethpc opens, and reading it from a credentials file.

The cluster config is the site's, readable by everyone: it must not hold a user's
password. A user's own credentials are a database URL in a file only they may read:
``$DETHPC_DATABASE_URL_FILE``, else the cluster config's ``database_url_file`` (``~`` is
the user running dethpc), else the config's ``database_url`` (with no password in it:
libpq then takes the role from the Unix user and the password from ``~/.pgpass``, or
the site's peer/certificate authentication), else the SQLite file in ``DETHPC_HOME``.

Like ssh with a private key, a credentials file that its group or others may read or
write, or that another user owns, is refused with what to run.

Owns: ``database_url(cluster)`` (the order above) and ``read_url_file``.
Must not: print or log a password: messages name the file, never its contents.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from dethpc.common.errors import ConfigError, FieldError

if TYPE_CHECKING:  # an annotation only: the read commands import ENV_VAR (issue 47)
    from dethpc.config.model import ClusterConfig

ENV_VAR = "DETHPC_DATABASE_URL_FILE"


def database_url(cluster: ClusterConfig) -> str:
    """The URL to open ("" for the SQLite default), by the order in the module docstring."""
    env = os.environ.get(ENV_VAR)
    if env:
        return read_url_file(Path(env).expanduser(), ENV_VAR, "the environment")
    if cluster.database_url_file is not None:
        return read_url_file(cluster.database_url_file, "database_url_file", cluster.source)
    return cluster.database_url


def read_url_file(path: Path, field: str, source: str) -> str:
    """The one URL in ``path``; ``ConfigError`` (at ``field``) when the file is
    missing, not its owner's only, or holds no database URL."""

    def refuse(message: str) -> ConfigError:
        return ConfigError([FieldError(field, f"{path}: {message}")], source)

    try:
        st = path.stat()
    except FileNotFoundError:
        raise refuse("no such file; ask your dethpc admin for your database credentials "
                     "(dethpc admin db add-user)") from None
    except OSError as exc:
        raise refuse(f"cannot read it: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise refuse("not a regular file")
    if st.st_uid != os.geteuid():
        raise refuse(f"it holds database credentials but belongs to uid {st.st_uid}, not "
                     f"to you (uid {os.geteuid()}); refused")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise refuse(f"it holds database credentials but its group or others may access it "
                     f"(mode {mode:04o}); refused: run chmod 600 {path}")
    try:
        lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise refuse(f"cannot read it: {exc}") from None
    urls = [ln for ln in lines if ln and not ln.startswith("#")]
    if len(urls) != 1:
        raise refuse(f"expected one database URL line, found {len(urls)}")
    from sqlalchemy.engine import make_url  # the parser, paid only with a credentials file
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(urls[0])
    except ArgumentError:
        # the line may hold a password: never echoed
        raise refuse("its line is not a database URL "
                     "(dialect+driver://user:password@host:port/database)") from None
    return urls[0]
