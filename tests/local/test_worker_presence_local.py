"""A pool worker's ``pool/alive/<task>`` file (real worker processes, no mocks).

What the daemon's quiet poll cadence (``dethpc.control.daemon.poll.workers_accounted``)
rests on: the file is there from the worker's start (before its preload), its mtime is
renewed every heartbeat whether the worker is idle or running a trial, and it goes when
the worker exits (drained, preempted); a worker killed with -9 leaves it to go stale.
Each wait is on the file itself, with a generous deadline. Wall time about 3-6 s.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from dethpc.common import worker_queue as queue
from tests.local import test_worker_pool_local as shared
from tests.local.test_worker_pool_local import Pool

pool = shared.pool   # the pool fixture of the worker tests: real workers, killed at the end


def mtime(path: Path) -> float:
    return path.stat().st_mtime if path.exists() else 0.0


def test_the_alive_file_is_renewed_idle_and_busy_and_goes_when_the_worker_exits(
        pool: Pool) -> None:
    alive = pool.paths.alive / "4_0"
    pool.start("w0", task="4_0")                  # heartbeat 0.3 s
    pool.wait_until(alive.exists, "the worker announces itself")
    first = mtime(alive)
    pool.wait_until(lambda: mtime(alive) > first, "renewed while idle")
    pool.submit(1, 1, length=60, step_time=0.05)
    pool.wait_until(lambda: pool.holder(1) == "w0", "w0 runs trial 1")
    busy = mtime(alive)
    pool.wait_until(lambda: mtime(alive) > busy and pool.holder(1) == "w0",
                    "renewed while a trial runs")
    assert queue.present(pool.paths, 1.0, now=mtime(alive) + 0.5) == {"4_0"}   # fresh
    assert queue.present(pool.paths, 1.0, now=mtime(alive) + 5.0) == set()   # stale later
    pool.wait_results(1)
    assert pool.drain() == {"w0": 0}
    assert not alive.exists()


def test_a_preempted_worker_removes_its_file_and_a_killed_one_leaves_it(pool: Pool) -> None:
    pool.start("w0", task="4_0")
    pool.start("w1", task="4_1")
    a0, a1 = pool.paths.alive / "4_0", pool.paths.alive / "4_1"
    pool.wait_until(lambda: a0.exists() and a1.exists(), "both announced")
    pool.workers["w0"].send_signal(signal.SIGUSR2)          # preempted while idle
    assert pool.workers["w0"].wait(timeout=30) == 85
    assert not a0.exists()
    pool.workers["w1"].kill()                               # its node dies: no handler
    pool.workers["w1"].wait()
    assert a1.exists()
    left = mtime(a1)
    assert queue.present(pool.paths, 1.0, now=left + 0.5) == {"4_1"}
    assert queue.present(pool.paths, 1.0, now=left + 1.5) == set()


@pytest.mark.parametrize("sigs", [(signal.SIGUSR2,), (signal.SIGTERM,),
                                  (signal.SIGUSR2, signal.SIGTERM)])
def test_a_worker_preempted_during_its_preload_exits_85_and_removes_its_file(
        pool: Pool, sigs: tuple[signal.Signals, ...]) -> None:
    """The file is there before the preload (seconds of imports); a preemption that
    comes then ends the start at once (not after the import), with the worker's
    requeue exit and without the file. Before, the signal's default action killed the
    worker (exit -12 for USR2) and left the file to go stale: the race CI met when the
    test above signalled a worker the moment its file appeared. A second signal while
    the worker leaves is only recorded (it raised again, out of ``main``'s handler)."""
    mark = pool.paths.root / "importing"
    pool.start("w0", task="4_0", preload="tests.fixtures.slow_import",
               SLOW_IMPORT_MARK=str(mark), SLOW_IMPORT_S="60")
    alive = pool.paths.alive / "4_0"
    pool.wait_until(lambda: mark.exists() and alive.exists(), "the preload has begun")
    sent = time.monotonic()
    for sig in sigs:      # two back to back: the preemption's, then the job's TERM
        pool.workers["w0"].send_signal(sig)
    assert pool.workers["w0"].wait(timeout=45) == 85
    assert time.monotonic() - sent < 45           # not after the 60 s import
    assert not alive.exists()


def test_a_worker_outside_a_job_keeps_no_file(pool: Pool) -> None:
    pool.start("w0")                              # no --task, no job ref: nothing to name
    pool.submit(1, 1, length=3)
    pool.wait_results(1)
    assert pool.drain() == {"w0": 0}
    assert not pool.paths.alive.exists() or not any(pool.paths.alive.iterdir())
