"""Where the state database lives, and telling the user once when that is a network
filesystem.

Owns: ``default_url`` (the SQLite file in ``DETHPC_HOME``), ``StoreLocation`` (a
database URL, its password masked; for SQLite the file and the filesystem under it),
``locate`` (URL -> location: one read of the mount table through
``dethpc.common.fstype.filesystem_of``), the warning's words (``network_warning``),
``warn_once`` (said once per ``DETHPC_HOME``: a marker file there remembers it) and
``check_store`` (what a command calls: no mount table read once the marker exists).
Must not: import SQLAlchemy or the ORM at module level (commands that open the store have
them already; ``config show-cluster`` must not pay for them), or open the database.

Why: the default store is ``$DETHPC_HOME/dethpc.db`` (``~/.dethpc``), and on most clusters
``~`` is NFS, Lustre or GPFS shared by every login node. SQLite's locking is unreliable
there (https://www.sqlite.org/faq.html#q5) and two login nodes may open the same file:
a site's PostgreSQL ``database_url``, or a home on one login node's local disk, is safe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dethpc.common.fstype import Mount, filesystem_of
from dethpc.common.paths import dethpc_home

SQLITE_PREFIX = "sqlite:///"
#: the SQLite file's name in ``DETHPC_HOME`` when no ``database_url`` is given
DEFAULT_DB = "dethpc.db"
#: the marker in ``DETHPC_HOME`` that says the warning was given for this home
WARNED_MARKER = "network-fs-warned"


@dataclass(frozen=True)
class StoreLocation:
    """Where a database URL points."""

    #: the URL with its password replaced by ``***``
    url: str
    #: the SQLite file; None for a database server (PostgreSQL)
    path: Path | None = None
    #: the mount holding ``path``; None for a server, or when the mount table is unreadable
    mount: Mount | None = None

    @property
    def network(self) -> bool:
        """True when the SQLite file is on a network (shared) filesystem."""
        return self.path is not None and self.mount is not None and self.mount.network

    @property
    def safe(self) -> bool | None:
        """True: a server, or SQLite on a local filesystem; False: SQLite on a network
        filesystem; None: SQLite on a filesystem that could not be told."""
        if self.path is None:
            return True
        if self.mount is None:
            return None
        return not self.mount.network

    def describe(self) -> str:
        """One line: what the store is, where, and whether that is safe."""
        if self.path is None:
            return f"database server {self.url}"
        if self.mount is None:
            return (f"SQLite file {self.path} on a filesystem dethpc could not tell "
                    "(no /proc/self/mountinfo): keep it on a local disk")
        m = self.mount
        where = f"{m.fstype} ({m.source} mounted at {m.mount_point})"
        if m.network:
            return (f"SQLite file {self.path} on {where}: a network filesystem, unsafe for "
                    "SQLite")
        return f"SQLite file {self.path} on {where}: local, safe for SQLite"

    def to_dict(self) -> dict[str, str | bool | None]:
        return {"url": self.url, "path": str(self.path) if self.path else None,
                "fstype": self.mount.fstype if self.mount else None,
                "mount_point": self.mount.mount_point if self.mount else None,
                "network": self.network, "safe": self.safe}


def default_url() -> str:
    """The store with no ``database_url``: the SQLite file in ``DETHPC_HOME``."""
    return f"{SQLITE_PREFIX}{dethpc_home() / DEFAULT_DB}"


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (the form ``Store`` opens as a file), else None."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    rest = url.removeprefix(SQLITE_PREFIX).split("?", 1)[0]
    return Path(rest).expanduser() if rest and rest != ":memory:" else None


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    from dethpc.store.access import safe_url  # SQLAlchemy's URL parser, paid only here

    return safe_url(url)


def locate(url: str) -> StoreLocation:
    """Where ``url`` points; for a SQLite file, the filesystem holding it (the file need
    not exist yet: its nearest existing directory answers)."""
    path = sqlite_path(url)
    if path is None:
        return StoreLocation(url=masked(url))
    return StoreLocation(url=url, path=path, mount=filesystem_of(path))


def network_warning(loc: StoreLocation, home: Path) -> str:
    """What is said when the SQLite store is on a network filesystem: what, why, the fix."""
    m = loc.mount
    assert m is not None and loc.path is not None  # only said for network locations
    return (
        f"dethpc: warning: the state database {loc.path} is on {m.fstype} ({m.source} "
        f"mounted at {m.mount_point}), a network filesystem that other login nodes may "
        "share. SQLite's file locking is unreliable there: dethpc commands or daemons on "
        "two login nodes at once can corrupt the database or lose updates. Fix, either: "
        "ask your site for a PostgreSQL database (database_url or database_url_file in "
        "the cluster config, docs/admin.md#a-shared-postgresql-database); or set "
        "DETHPC_HOME to a directory on this login node's local disk (for example "
        "/var/tmp/$USER/dethpc), keep runs_root on the shared filesystem, and use dethpc "
        "on this login node only (from elsewhere: dethpc --remote <this node> ..., "
        f"docs/remote.md). Said once for {home} (remove {home / WARNED_MARKER} to see it "
        "again).")


def warn_once(loc: StoreLocation, home: Path, say: Callable[[str], None]) -> bool:
    """Say ``network_warning`` when ``loc`` is a SQLite file on a network filesystem and
    it was not said for ``home`` before; leave the marker that says it was. True when
    said. A home where the marker cannot be written hears it on every command."""
    if not loc.network:
        return False
    marker = home / WARNED_MARKER
    if marker.exists():
        return False
    say(network_warning(loc, home))
    m = loc.mount
    assert m is not None
    try:
        marker.write_text(f"{loc.path} on {m.fstype} ({m.source} at {m.mount_point})\n",
                          encoding="utf-8")
    except OSError:
        pass
    return True


def check_store(url: str, home: Path, say: Callable[[str], None]) -> bool:
    """What a command that opened the store at ``url`` calls: ``warn_once`` for a SQLite
    file, at the cost of one ``stat`` of the marker once it was said (the mount table is
    read only while it was not), nothing for a database server. True when said."""
    if sqlite_path(url) is None or (home / WARNED_MARKER).exists():
        return False
    return warn_once(locate(url), home, say)
