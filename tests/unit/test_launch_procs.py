"""Supervision with real child processes: prefixes, exit codes, taking the job down."""

from __future__ import annotations

import sys

from dethpc.launch._common import WorkerSpec
from dethpc.launch._procs import exit_code, run_workers

PY = sys.executable


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


def test_clean_stop_codes_do_not_kill_others() -> None:
    # rank 0 stops with 80 (preempted) at once; rank 1 finishes its own work and exits 80 too
    code = run_workers([spec("raise SystemExit(80)", 0),
                        spec("import time; time.sleep(0.5); raise SystemExit(80)", 1)])
    assert code == 80


def test_first_failure_wins() -> None:
    assert run_workers([spec("raise SystemExit(0)", 0), spec("raise SystemExit(3)", 1)]) == 3


def test_exit_code_of_signal() -> None:
    assert exit_code(-15) == 143 and exit_code(2) == 2
