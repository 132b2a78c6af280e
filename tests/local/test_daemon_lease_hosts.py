"""Issue 15 item 3: one daemon per user, whatever the login node. Two real ``dethpc
daemon run`` processes with two hostnames (each in its own UTS namespace: login-a,
login-b), each with its own ``DETHPC_HOME`` (so their fcntl locks do not see each
other, as on two login nodes whose NFS locks cannot be trusted), sharing one database:

- while login-a's daemon holds the lease, login-b's exits with a message naming login-a;
- with ``--wait`` it waits, and takes over once login-a's daemon is SIGKILLed and its
  lease has run out (``daemon_lease_s``), never before;
- a daemon that stops cleanly releases the lease.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dethpc.control.lease import Holder, Lease
from dethpc.store import Store
from tests.slurm.fixtures.harness import wait_until

REPO = Path(__file__).resolve().parents[2]
LEASE_S = 3.0

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="needs root and unshare for a second hostname")


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Path, Store, list[subprocess.Popen[bytes]]]]:
    db = tmp_path / "shared.db"
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump({
        "backend": "local", "runs_root": str(tmp_path / "runs"),
        "database_url": f"sqlite:///{db}", "tick_min_s": 0.1, "tick_max_s": 0.5,
        "daemon_lease_s": LEASE_S}))
    procs: list[subprocess.Popen[bytes]] = []
    yield tmp_path, Store(f"sqlite:///{db}"), procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)


def daemon(root: Path, host: str, *args: str) -> subprocess.Popen[bytes]:
    home = root / f"home-{host}"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "DETHPC_HOME": str(home), "PYTHONPATH": str(REPO),
           "DETHPC_CLUSTER_CONFIG": str(root / "cluster.yaml")}
    log = open(root / f"{host}.log", "wb")  # noqa: SIM115 - the child's output
    return subprocess.Popen(
        ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host,
         sys.executable, "-m", "dethpc.surfaces.cli.main", "daemon", "run", *args],
        env=env, stdout=log, stderr=subprocess.STDOUT)


def holder(store: Store) -> Holder | None:
    return Lease(store, _user()).current()


def _user() -> str:
    from dethpc.control.experiments import current_user

    return current_user()


def test_second_login_node_waits_and_takes_over_a_dead_daemon(
        site: tuple[Path, Store, list[subprocess.Popen[bytes]]]) -> None:
    root, store, procs = site
    a = daemon(root, "login-a")
    procs.append(a)
    first = wait_until("login-a to hold the lease",
                       lambda: (h := holder(store)) and h.host == "login-a" and h or None,
                       timeout=60)
    assert first.pid == str(a.pid)

    b_now = daemon(root, "login-b")
    procs.append(b_now)
    assert b_now.wait(timeout=60) == 1
    said = (root / "login-b.log").read_text()
    assert "runs on host login-a" in said and "--wait" in said, said

    b = daemon(root, "login-b", "--wait")
    procs.append(b)
    wait_until("login-b to wait", lambda: "waiting for the lease" in
               (root / "login-b.log").read_text() or None, timeout=60)
    time.sleep(0.1)
    h = holder(store)
    assert h is not None and h.host == "login-a"      # a lives: b must not take it

    a.send_signal(signal.SIGKILL)
    a.wait(timeout=30)
    killed_at = time.time()
    took = wait_until("login-b to take the lease over",
                      lambda: (h := holder(store)) and h.host == "login-b" and h or None,
                      timeout=60)
    print(f"login-b took over {time.time() - killed_at:.1f} s after login-a was killed "
          f"(lease {LEASE_S} s)")
    assert took.pid == str(b.pid)

    b.send_signal(signal.SIGTERM)
    assert b.wait(timeout=60) == 0
    assert holder(store) is None                      # released on a clean stop
