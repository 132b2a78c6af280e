"""A pool worker and its forked processes do not outlive their parents (real processes).

Seen in a benchmark on the dev cluster (proctrack/linuxproc): a worker outlived its job,
reparented to PID 1, and claimed and forked trials for minutes. Proves, with a trial
training and a spare hung in its preload call (what a slow ``torch.cuda:init`` is):

* the worker's parent (the job's batch shell) SIGKILLed: the worker stops as on
  SIGTERM (the trial preempted, its lease handed back, its run recorded ``preempted``)
  and exits, and its trial and spare with it;
* the worker itself SIGKILLed (no handler runs): its trial and its spare still end
  (their own parent-death signal); the lease stays for the daemon to expire.

Exits are awaited on pidfds (Linux), each with a generous deadline.
Wall time about 1-3 s.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dethpc.common import worker_queue as queue
from tests.local.test_worker_pool_local import Pool

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="pidfds are Linux's")

REPO = Path(__file__).parents[2]
#: a preload call: the first one (the spare that takes the trial) returns at once, every
#: later one hangs; each records its pid (the first: the trial's, the second: the spare's)
SLOW_INIT = """\
import os, time
def init():
    with open(os.environ["SPARE_CALLS"], "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    if len(open(os.environ["SPARE_CALLS"]).read().split()) > 1:
        time.sleep(600)
"""
DEADLINE_S = 60.0


def wait_until(cond: Callable[[], object], what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.05)


def wait_exits(fds: dict[str, int], timeout_s: float = DEADLINE_S) -> list[str]:
    """Wait until each process has exited (its pidfd readable) or the deadline passed;
    the names of those still alive then."""
    alive = dict(fds)
    deadline = time.monotonic() + timeout_s
    while alive and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select(list(alive.values()), [], [], left)
        alive = {n: fd for n, fd in alive.items() if fd not in ready}
    return sorted(alive)


class Orphanable(Pool):
    """The test's pool, with the spare's slow call on the path."""

    def __init__(self, run_dir: Path, tmp: Path) -> None:
        super().__init__(run_dir)
        (tmp / "slow_init_mod.py").write_text(SLOW_INIT)
        self.calls = tmp / "calls.txt"
        self.env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp}",
                    "SPARE_CALLS": str(self.calls)}
        self.env.pop("SLURM_ARRAY_TASK_ID", None)
        self.argv = [sys.executable, "-m", "dethpc.launch.worker", "--run-dir",
                     str(run_dir), "--worker-id", "w0", "--heartbeat-s", "0.3",
                     "--preload", "dethpc.core,slow_init_mod:init"]
        self.killed: list[subprocess.Popen[bytes]] = []
        #: a pidfd per process watched, opened while it lives (no reused pid can fool it)
        self.fds: dict[str, int] = {}

    def watch(self, name: str, pid: int) -> None:
        self.fds[name] = os.pidfd_open(pid)

    def training(self) -> None:
        """Trial 7 trains in w0's first spare and the next spare hangs in its call:
        both watched (``trial``, ``spare``)."""
        self.submit(7, 1, length=100_000, step_time=0.05)
        wait_until(lambda: self.steps(7) >= 3 and self.holder(7) == "w0", "trial 7 trains")
        wait_until(lambda: self.calls.exists() and len(self.calls.read_text().split()) == 2,
                   "the next spare is in its call")
        trial, spare = (int(x) for x in self.calls.read_text().split())
        self.watch("trial", trial)
        self.watch("spare", spare)


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Orphanable]:
    p = Orphanable(tmp_path / "run", tmp_path)
    yield p
    for fd in p.fds.values():     # a failed test leaves nothing behind
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(fd)
    for w in [*p.workers.values(), *p.killed]:
        if w.poll() is None:
            w.kill()
            w.wait()


def test_worker_stops_and_hands_back_when_its_batch_shell_is_killed(
        pool: Orphanable, tmp_path: Path) -> None:
    err = tmp_path / "worker.err"
    pid_file = tmp_path / "worker.pid"
    # the batch shell's part: the worker in the background, then wait for it
    shell = subprocess.Popen(
        ["bash", "-c", '"$@" 2>"$WORKER_ERR" & echo $! >"$WORKER_PID"; wait', "shell",
         *pool.argv],
        env={**pool.env, "WORKER_ERR": str(err), "WORKER_PID": str(pid_file)})
    pool.killed.append(shell)
    wait_until(lambda: pid_file.exists() and pid_file.read_text().endswith("\n"),
               "the shell started the worker")
    pool.watch("worker", int(pid_file.read_text()))
    pool.training()
    shell.kill()                        # the job ends; the shell cannot pass a signal on
    shell.wait()
    assert wait_exits(pool.fds) == [], err.read_text()
    assert "its parent (pid" in err.read_text() and "is gone" in err.read_text()
    assert pool.exits(7) == ["preempted"]             # the run is recorded, never lost
    assert queue.active_leases(pool.paths) == []      # and handed back: any worker resumes it
    assert queue.pending(pool.paths) == [f"{queue.item_name(7, 1)}.json"]


def test_a_killed_workers_trial_and_spare_end_with_it(pool: Orphanable) -> None:
    w0 = subprocess.Popen(pool.argv, env=pool.env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    pool.workers["w0"] = w0
    pool.training()
    w0.kill()                           # no handler runs: nothing hands the lease back
    w0.wait()
    assert wait_exits(pool.fds) == []
    # the lease waits for the daemon's expiry (test_worker_pool_local's dead worker)
    assert [n.split(queue.LEASE_SEP)[0] for n in queue.active_leases(pool.paths)] == ["w0"]
