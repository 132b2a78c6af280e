"""The daemon's supervisor (``dethpc.common.supervisor``), with real processes: a daemon
started by ``dethpc submit``/``daemon start`` and SIGKILLed comes back by itself and the
experiment completes; ``daemon stop`` ends the supervisor too, even while it waits out a
back-off; a daemon that keeps crashing at start is restarted with back-off and then
given up on, with the reason in the log."""

import json
import os
import signal
import sqlite3
import time
from pathlib import Path

from dethpc.common.supervisor import Policy
from dethpc.control import service
from tests.local.conftest import TOY, cli, dethpc_processes, wait_for, write_config


def _daemon_pid(home: Path) -> int | None:
    try:
        return int((home / "daemon.pid").read_text())
    except (FileNotFoundError, ValueError):
        return None


def _lease_pid(home: Path) -> int | None:
    """The pid of the live holder of the daemon lease (``host:pid:token``)."""
    with sqlite3.connect(home / "dethpc.db") as db:
        rows = db.execute("SELECT holder, expires_at FROM daemonlease").fetchall()
    live = [h for h, until in rows if h and until > time.time()]
    return int(live[0].split(":")[1]) if live else None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _describe(exp: int) -> dict:
    return json.loads(cli("experiment", "describe", exp, "--json").stdout)


def test_a_sigkilled_daemon_comes_back_and_its_experiment_completes(home, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", hyperparameters={
        "x": {"type": "double", "minval": 0, "maxval": 6}, "step_time": 0.3})
    exp = json.loads(cli("submit", cfg, TOY, "--json").stdout)["id"]
    trials = Path(_describe(exp)["run_dir"]) / "trials"
    wait_for(lambda: any(trials.glob("*/metrics.jsonl")), interval=0.02,
             what="a training trial")
    first = _daemon_pid(home)
    assert first is not None and _lease_pid(home) == first
    keeper = int((home / "daemon-supervisor.pid").read_text())
    os.kill(first, signal.SIGKILL)
    # a new daemon holds the lock and the lease, nobody having run a dethpc command
    wait_for(lambda: _daemon_pid(home) not in (None, first) and _lease_pid(home)
             == _daemon_pid(home), timeout=120, what="a restarted daemon holding the lease")
    second = _daemon_pid(home)
    assert dethpc_processes(home) == {keeper: "supervisor", second: "daemon"}
    assert not Path(f"/proc/{first}").exists() or not _alive(first)
    cli("experiment", "wait", exp, "--timeout", "180", timeout=200)
    d = _describe(exp)
    assert d["state"] == "COMPLETED"
    assert len(d["trials"]) == 4 and all(t["state"] == "COMPLETED" for t in d["trials"])
    log = (home / "daemon.log").read_text()
    assert "killed by SIGKILL" in log, log


def test_daemon_stop_during_a_back_off_leaves_no_process(home):
    cli("daemon", "start")
    keeper = int((home / "daemon-supervisor.pid").read_text())
    first = _daemon_pid(home)
    assert first is not None and dethpc_processes(home) == {keeper: "supervisor", first: "daemon"}
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: "restarting it in" in (home / "daemon.log").read_text(), interval=0.02,
             what="the supervisor's back-off")
    # no daemon runs, the supervisor waits out its back-off: a stop (in this process, in
    # milliseconds, within the 1 s back-off) must end the supervisor too
    service.stop()
    # its lock is free: what is left is its interpreter's exit
    wait_for(lambda: not _alive(keeper), timeout=30, interval=0.05, what="its exit")
    wait_for(lambda: dethpc_processes(home) == {}, timeout=30, interval=0.05,
             what="no process left")
    assert cli("daemon", "status", check=False).returncode == 1
    log = (home / "daemon.log").read_text()
    assert "stop asked" in log, log


def test_a_daemon_crashing_at_start_is_restarted_with_back_off_then_given_up(home):
    cli("daemon", "start")
    keeper = int((home / "daemon-supervisor.pid").read_text())
    first = _daemon_pid(home)
    assert first is not None
    good = (home / "cluster.yaml").read_text()
    # from now on every daemon start fails: its cluster config does not parse
    (home / "cluster.yaml").write_text("backend: [local\n")
    try:
        log_before = len((home / "daemon.log").read_text())
        killed_at = time.monotonic()
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: not _alive(keeper), timeout=300, interval=0.1,
                 what="the supervisor giving up")
        took = time.monotonic() - killed_at
    finally:
        (home / "cluster.yaml").write_text(good)
    log = (home / "daemon.log").read_text()[log_before:]
    p = Policy()
    # the kill and every failed start within quick_s counted: max_quick_failures in all,
    # so max_quick_failures - 1 restarts, each after its doubled back-off
    starts = [line for line in log.splitlines() if "dethpc supervisor" in line
              and ": started pid" in line]
    assert len(starts) == p.max_quick_failures - 1, log
    waits = sum(min(p.max_backoff_s, p.backoff_s * 2 ** k)
                for k in range(p.max_quick_failures - 1))
    assert took >= waits, (took, waits, log)
    assert "gave up: the child failed 5 times in a row" in log, log
    assert dethpc_processes(home) == {}
