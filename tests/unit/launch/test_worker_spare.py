"""The pool worker's spare (dethpc.launch.worker.forkserver): a preload entry
``module:function`` is called in the next trial's own process, forked ahead of the trial,
so what must not happen before a fork (CUDA's initialisation) is paid while the previous
trial runs. Real forks, no mocks."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dethpc.launch.worker import forkserver

MODULE = """
import os, time
CALLS = []
def init():
    CALLS.append(os.getpid())
    with open(os.environ["SPARE_MARK"], "a") as fh:
        fh.write(f"{os.getpid()} {time.time()}\\n")
def hang():
    time.sleep(60)
def fail():
    raise RuntimeError("no device")
"""


@pytest.fixture
def mod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A spare-init module on the path; the file its calls append ``pid time`` to."""
    (tmp_path / "spare_mod_for_test.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    mark = tmp_path / "calls.txt"
    monkeypatch.setenv("SPARE_MARK", str(mark))
    yield mark
    sys.modules.pop("spare_mod_for_test", None)


def calls(mark: Path) -> list[int]:
    return [int(line.split()[0]) for line in mark.read_text().splitlines()] \
        if mark.exists() else []


def wait_for(cond: object, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.02)


def exit_code(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_split_preload() -> None:
    assert forkserver.split_preload(["torch", "torch.cuda:init", "m:f", "dethpc.core"]) == (
        ["torch", "torch.cuda", "m", "dethpc.core"], ["torch.cuda:init", "m:f"])
    assert forkserver.split_preload(["torch"]) == (["torch"], [])


def test_the_trial_runs_in_the_spare_that_made_the_call_and_the_next_overlaps_it(
        tmp_path: Path, mod: Path) -> None:
    import spare_mod_for_test as m

    spares = forkserver.Spares(["spare_mod_for_test:init"])
    spares.refill()
    assert spares.spare is not None
    first = spares.spare.pid
    wait_for(lambda: calls(mod) == [first], "the spare's call before any trial")
    # the trial waits for the next spare's call: it runs while this trial runs
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys, time\n"
        "print('trial pid', os.getpid(), 'cwd', os.getcwd(), os.environ['DETHPC_TRIAL_ID'])\n"
        "end = time.monotonic() + 20\n"
        "while time.monotonic() < end:\n"
        "    lines = open(os.environ['SPARE_MARK']).read().splitlines()\n"
        "    if len(lines) >= 2:\n"
        "        sys.exit(0)\n"
        "    time.sleep(0.02)\n"
        "sys.exit(3)\n")
    env = {"PATH": os.environ["PATH"], "DETHPC_TRIAL_ID": "7", "SPARE_MARK": str(mod)}
    pid, started = spares.spawn(["python3", str(script)], env, str(tmp_path),
                                tmp_path / "out.log")
    assert pid == first and started >= 0
    assert exit_code(pid) == 0, (tmp_path / "out.log").read_text()
    assert f"trial pid {first} cwd {tmp_path} 7" in (tmp_path / "out.log").read_text()
    assert spares.spare is not None and spares.spare.pid != first
    second = spares.spare.pid
    assert calls(mod) == [first, second]
    assert m.CALLS == []        # never called in the worker itself (CUDA: not before fork)
    spares.close()
    assert spares.spare is None and gone(second)


def test_a_spare_busy_in_its_call_is_dropped_at_once(tmp_path: Path, mod: Path) -> None:
    spares = forkserver.Spares(["spare_mod_for_test:hang"])
    spares.refill()
    assert spares.spare is not None
    pid = spares.spare.pid
    t0 = time.monotonic()
    spares.close()
    assert time.monotonic() - t0 < 10 and gone(pid)


def test_a_failing_call_leaves_the_trial_to_itself(tmp_path: Path, mod: Path) -> None:
    spares = forkserver.Spares(["spare_mod_for_test:fail"])
    spares.refill()
    script = tmp_path / "ok.py"
    script.write_text("print('ran')\n")
    pid, _ = spares.spawn(["python3", str(script)], {"PATH": os.environ["PATH"]},
                          str(tmp_path), tmp_path / "o.log")
    assert exit_code(pid) == 0 and "ran" in (tmp_path / "o.log").read_text()
    spares.close()


def test_a_dead_spare_is_replaced_by_a_fresh_fork(tmp_path: Path, mod: Path) -> None:
    spares = forkserver.Spares(["spare_mod_for_test:init"])
    spares.refill()
    assert spares.spare is not None
    dead = spares.spare.pid
    wait_for(lambda: calls(mod) == [dead], "the spare's call")
    os.kill(dead, signal.SIGKILL)
    assert exit_code(dead) == -signal.SIGKILL
    script = tmp_path / "ok.py"
    script.write_text("import os; print('ran in', os.getpid())\n")
    pid, _ = spares.spawn(["python3", str(script)], {"PATH": os.environ["PATH"]},
                          str(tmp_path), tmp_path / "o.log")
    assert pid != dead and exit_code(pid) == 0
    assert f"ran in {pid}" in (tmp_path / "o.log").read_text()
    spares.close()


def test_without_calls_there_is_no_spare(tmp_path: Path) -> None:
    spares = forkserver.Spares(())
    spares.refill()
    assert spares.spare is None
    script = tmp_path / "ok.py"
    script.write_text("print('ran')\n")
    pid, _ = spares.spawn(["python3", str(script)], {"PATH": os.environ["PATH"]},
                          str(tmp_path), tmp_path / "o.log")
    assert exit_code(pid) == 0 and spares.spare is None


def test_a_spare_still_in_its_call_does_not_hold_the_worker(tmp_path: Path, mod: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The worker waits about HAND_WAIT_S for the trial's start, then goes on (its
    heartbeats, kill checks); the trial runs once the spare's call returns."""
    (tmp_path / "slow_mod_for_test.py").write_text(
        "import time\ndef init():\n    time.sleep(3)\n")
    monkeypatch.setattr(forkserver, "HAND_WAIT_S", 0.2)
    spares = forkserver.Spares(["slow_mod_for_test:init"])
    spares.refill()
    script = tmp_path / "ok.py"
    script.write_text("print('ran late')\n")
    t0 = time.monotonic()
    pid, started = spares.spawn(["python3", str(script)], {"PATH": os.environ["PATH"]},
                                str(tmp_path), tmp_path / "o.log")
    assert time.monotonic() - t0 < 2.5 and started < 2.5
    assert exit_code(pid) == 0 and "ran late" in (tmp_path / "o.log").read_text()
    spares.close()
    sys.modules.pop("slow_mod_for_test", None)
