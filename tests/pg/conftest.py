"""A throwaway PostgreSQL server for the store tests: Debian's postgresql binaries,
a data directory under /tmp, stopped at the end. On 127.0.0.1 the ``dethpc`` superuser
is trusted; every other role (the users that ``dethpc admin db add-user`` creates) logs
in with its SCRAM password.

Without the binaries the tests skip with the reason, except under ``CI=true``,
where they FAIL (``scripts/test.sh`` installs Debian's ``postgresql`` as root).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import in_ci


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unavailable(reason: str) -> None:
    if in_ci():
        pytest.fail(f"CI=true makes the PostgreSQL tests mandatory, but {reason}")
    pytest.skip(f"no PostgreSQL: {reason} (apt-get install postgresql)")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    bindir = _bindir()
    if bindir is None:
        _unavailable("Debian's postgresql binaries are not installed")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    assert bindir is not None
    root = Path(tempfile.mkdtemp(prefix="dethpc-pg-"))
    os.chmod(root, 0o755)
    data = root / "data"
    # the server refuses to run as root: as root, run it as Debian's postgres user
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(root, "postgres", "postgres")
    port = _free_port()

    def run(*argv: str) -> None:
        subprocess.run([*as_user, *argv], check=True, capture_output=True, timeout=120)

    run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "dethpc", "-E", "UTF8")
    (data / "pg_hba.conf").write_text(
        "local all all trust\n"
        "host all dethpc 127.0.0.1/32 trust\n"
        "host all all 127.0.0.1/32 scram-sha-256\n")
    run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-o",
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start")
    try:
        run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "dethpc",
            "dethpc")
        yield f"postgresql+psycopg://dethpc@127.0.0.1:{port}/dethpc"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast",
                        "-w", "stop"], capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)
