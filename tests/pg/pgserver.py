"""A throwaway PostgreSQL server: Debian's binaries, a data directory under /tmp, run as
the ``postgres`` user when started by root (the server refuses to run as root), stopped
and removed at the end. On 127.0.0.1 the ``dethpc`` superuser is trusted; every other
role (the users ``dethpc admin db add-user`` creates) logs in with its SCRAM password.

Owns: ``PgServer`` (start, stop, a database's URL, a database made as a copy of another:
``CREATE DATABASE ... TEMPLATE``, a database's size) and ``bindir``. Serves tests/pg's
``postgres_url`` fixture and bench/tick_scale and bench/daemon_cost, which load this file
by its path through ``bench/pgserver.py`` (their ``--trees`` put an older tree's
``tests`` package first on ``sys.path``).
Must not: import pytest or dethpc (the bench loads it beside any tree).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

PG_HBA = ("local all all trust\n"
          "host all dethpc 127.0.0.1/32 trust\n"
          "host all all 127.0.0.1/32 scram-sha-256\n")


def bindir() -> Path | None:
    """The newest installed server's binaries (``/usr/lib/postgresql/<major>/bin``)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NoPostgres(RuntimeError):
    """Debian's PostgreSQL binaries are not installed."""


@dataclass
class PgServer:
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="dethpc-pg-")))
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        found = bindir()
        if found is None:
            raise NoPostgres("no PostgreSQL binaries (/usr/lib/postgresql/*/bin): "
                             "apt-get install postgresql")
        self.bin = found
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *argv: str) -> str:
        return subprocess.run([*self.as_user, *argv], check=True, capture_output=True,
                              text=True, timeout=600).stdout

    def start(self) -> None:
        os.chmod(self.root, 0o755)
        if self.as_user:
            shutil.chown(self.root, "postgres", "postgres")
        data = self.root / "data"
        self._run(str(self.bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "dethpc",
                  "-E", "UTF8")
        (data / "pg_hba.conf").write_text(PG_HBA)
        self._run(str(self.bin / "pg_ctl"), "-D", str(data), "-l", str(self.root / "server.log"),
                  "-w", "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1",
                  "start")

    def stop(self) -> None:
        subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.root / "data"),
                        "-m", "fast", "-w", "stop"], capture_output=True, timeout=120)
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, db: str) -> str:
        return f"postgresql+psycopg://dethpc@127.0.0.1:{self.port}/{db}"

    def _client(self, tool: str, *args: str) -> str:
        return self._run(str(self.bin / tool), "-h", "127.0.0.1", "-p", str(self.port),
                         "-U", "dethpc", *args)

    def create(self, db: str, template: str | None = None) -> None:
        """A new database ``db``, a copy of ``template`` when given (dropped first)."""
        self._client("dropdb", "--if-exists", db)
        self._client("createdb", *(["-T", template] if template else []), db)

    def size_mb(self, db: str) -> float:
        out = self._client("psql", "-At", "-d", db, "-c",
                           f"SELECT pg_database_size('{db}')")
        return round(int(out.strip()) / 2**20, 1)
