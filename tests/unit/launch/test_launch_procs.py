"""Supervision with real child processes: prefixes, exit codes, taking the job down."""

from __future__ import annotations

import sys

import pytest

from dethpc.launch._common import WorkerSpec
from dethpc.launch._procs import exit_code, run_workers, setup_logging

PY = sys.executable


@pytest.fixture(autouse=True)
def launcher_logging() -> None:
    """The supervisor's messages go to stderr as in a launcher (``launcher_main`` sets this
    up); without it they would reach stderr only after another test had set it up."""
    setup_logging()


def spec(code: str, rank: int) -> WorkerSpec:
    return WorkerSpec([PY, "-c", code], {"PATH": "/usr/bin:/bin"}, rank)


def test_output_is_prefixed_with_rank(capfd) -> None:
    assert run_workers([spec("print('hello'); import sys; print('err', file=sys.stderr)", 3)]) == 0
    out, err = capfd.readouterr()
    assert "[rank=3] hello\n" in out
    assert "[rank=3] err\n" in err


def test_failing_worker_takes_the_others_down(capfd) -> None:
    # rank 1 would block forever on stdin-less sleep: only the supervisor can end it
    sleeper = spec("import time\nwhile True: time.sleep(1)", 1)
    code = run_workers([spec("raise SystemExit(7)", 0), sleeper])
    assert code == 7
    assert "rank 0 exited with code 7; terminating the other" in capfd.readouterr().err


RANK0_STOPS = """
import os, sys
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    f.write(str(os.getpid()))
os.replace(tmp, sys.argv[1])
raise SystemExit(80)
"""

# waits until rank 0 has exited and been reaped by the supervisor, stays a moment in
# which a (wrong) SIGTERM would end it, then finishes its checkpoint and exits 80
RANK1_FINISHES = """
import os, sys, time
pid_file, done = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 60
while not os.path.exists(pid_file):
    if time.monotonic() > deadline: sys.exit(3)
    time.sleep(0.01)
pid = int(open(pid_file).read())
while True:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break
    if time.monotonic() > deadline: sys.exit(3)
    time.sleep(0.01)
time.sleep(0.5)
open(done, "w").write("checkpoint written")
raise SystemExit(80)
"""


def test_clean_stop_codes_do_not_kill_others(tmp_path, capfd) -> None:
    """Rank 0 stops with 80 (preempted) at once; rank 1, still writing its part of the
    checkpoint, is left to finish and exits 80 too. Killing it would lose the checkpoint
    and still return 80, so the test checks that rank 1 finished."""
    pid0, done1 = str(tmp_path / "rank0.pid"), tmp_path / "rank1.done"
    code = run_workers([WorkerSpec([PY, "-c", RANK0_STOPS, pid0], {"PATH": "/usr/bin:/bin"}, 0),
                        WorkerSpec([PY, "-c", RANK1_FINISHES, pid0, str(done1)],
                                   {"PATH": "/usr/bin:/bin"}, 1)])
    assert code == 80
    assert done1.read_text() == "checkpoint written"
    assert "terminating the other" not in capfd.readouterr().err


def test_first_failure_wins() -> None:
    assert run_workers([spec("raise SystemExit(0)", 0), spec("raise SystemExit(3)", 1)]) == 3


def test_exit_code_of_signal() -> None:
    assert exit_code(-15) == 143 and exit_code(2) == 2
