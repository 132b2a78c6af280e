"""Preemption: a real signal and the stop file set the flag; init() exits 80/81."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dethpc.core as core
from dethpc.common.errors import DethpcError
from dethpc.common.exitcodes import EXIT_PREEMPTED, EXIT_STOPPED
from dethpc.core._preempt import parse_signal

REPO = Path(__file__).resolve().parents[3]


def _trial(tmp_path: Path) -> Path:
    trial = tmp_path / "trial"
    trial.mkdir()
    (trial / "hparams.json").write_text("{}")
    return trial


def _env(trial: Path, **extra: str) -> dict[str, str]:
    return {"DETHPC_TRIAL_DIR": str(trial), **extra}


@pytest.mark.parametrize("name", ["USR2", "SIGUSR1", "TERM"])
def test_real_signal_sets_flag(tmp_path: Path, name: str) -> None:
    trial = _trial(tmp_path)
    sig = parse_signal(name)
    with core.init(env=_env(trial, DETHPC_PREEMPT_SIGNAL=name.removeprefix("SIG")),
                   exit_on_preempt=False) as ctx:
        assert ctx.preempt.should_preempt() is False and ctx.preempt.reason is None
        os.kill(os.getpid(), sig)
        assert ctx.preempt.should_preempt() is True
        assert ctx.preempt.reason == "signal"
        assert ctx.preempt.should_preempt() is True  # sticky
    assert ctx.preempt.exit_code() == EXIT_PREEMPTED


def test_sigterm_always_handled(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    with core.init(env=_env(trial), exit_on_preempt=False) as ctx:
        os.kill(os.getpid(), signal.SIGTERM)
        assert ctx.preempt.should_preempt() and ctx.preempt.reason == "signal"


def test_handlers_restored_after_exit(tmp_path: Path) -> None:
    def mine(signum: int, frame: object) -> None:
        pass

    before = signal.signal(signal.SIGUSR2, mine)
    try:
        with core.init(env=_env(_trial(tmp_path))):
            assert signal.getsignal(signal.SIGUSR2) is not mine
        assert signal.getsignal(signal.SIGUSR2) is mine
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGUSR2, before)


LATE_SIGNAL = """
import os, signal, subprocess, sys, time
import dethpc.core as core
with core.init(env={"DETHPC_TRIAL_DIR": sys.argv[1]}):
    pass                                    # training done, final weights saved
os.kill(os.getpid(), signal.SIGUSR2)        # the time-limit signal, a moment too late
time.sleep(0.1)
# a program started later does not inherit the drop: USR2 still kills it
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
time.sleep(0.3)
child.send_signal(signal.SIGUSR2)
sys.exit(0 if child.wait() == -signal.SIGUSR2 else 3)
"""


def test_preempt_signal_after_the_context_is_left_does_not_kill(tmp_path: Path) -> None:
    """A run that finished must exit 0 even if the preemption signal comes after
    ``core.init()`` is left; USR2's default action (kill, 140) made the batch shell
    requeue a finished trial."""
    trial = _trial(tmp_path)
    proc = subprocess.run([sys.executable, "-c", LATE_SIGNAL, str(trial)],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert proc.returncode == 0


@pytest.mark.parametrize(("content", "reason"), [("stop", "stop"), ("pause\n", "pause"),
                                                 ("", "stop")])
def test_stop_file(tmp_path: Path, content: str, reason: str) -> None:
    trial = _trial(tmp_path)
    with core.init(env=_env(trial), stop_check_interval_s=0, exit_on_preempt=False) as ctx:
        assert ctx.preempt.should_preempt() is False
        (trial / "stop").write_text(content)
        assert ctx.preempt.should_preempt() is True
        assert ctx.preempt.reason == reason
    assert ctx.preempt.exit_code() == EXIT_STOPPED


def test_not_acknowledged_means_no_exit(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    with core.init(env=_env(trial)) as ctx:
        os.kill(os.getpid(), signal.SIGUSR2)  # received but never asked: no exit code
    assert ctx.preempt.exit_code() is None


def test_init_exits_with_system_exit(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    with pytest.raises(SystemExit) as info, core.init(env=_env(trial)) as ctx:
        os.kill(os.getpid(), signal.SIGUSR2)
        assert ctx.preempt.should_preempt()
    assert info.value.code == EXIT_PREEMPTED


def test_explicit_only_never_preempts(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    (trial / "stop").write_text("stop")
    with core.init(env=_env(trial), preempt_mode=core.PreemptMode.ExplicitOnly) as ctx:
        assert ctx.preempt.should_preempt() is False


def test_bad_signal_name() -> None:
    with pytest.raises(DethpcError, match="not a signal"):
        parse_signal("NOPE")
    assert parse_signal("12") == signal.SIGUSR2


SCRIPT = """
import os, signal, sys, dethpc.core as core
mode = sys.argv[1]
with core.init(stop_check_interval_s=0) as ctx:
    if mode == "signal":
        os.kill(os.getpid(), signal.SIGUSR2)
    elif mode == "stop":
        open(os.path.join(os.environ["DETHPC_TRIAL_DIR"], "stop"), "w").write("stop")
    if ctx.preempt.should_preempt():
        print("checkpointing", ctx.preempt.reason)
print("unreachable" if mode != "none" else "done")
"""


@pytest.mark.parametrize(("mode", "code"), [("signal", EXIT_PREEMPTED), ("stop", EXIT_STOPPED),
                                            ("none", 0)])
def test_exit_codes_from_subprocess(tmp_path: Path, mode: str, code: int) -> None:
    trial = _trial(tmp_path)
    env = {**os.environ, "DETHPC_TRIAL_DIR": str(trial), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True,
                          text=True)
    assert proc.returncode == code, proc.stderr
    assert "unreachable" not in proc.stdout
    if mode != "none":
        assert f"checkpointing {mode}" in proc.stdout


def test_subprocess_signal_from_outside(tmp_path: Path) -> None:
    """The flag is set by a signal sent by another process while the job waits."""
    trial = _trial(tmp_path)
    script = ("import sys, time, dethpc.core as core\n"
              "with core.init() as ctx:\n"
              "    print('ready', flush=True)\n"
              "    while not ctx.preempt.should_preempt():\n"
              "        time.sleep(0.01)\n")
    env = {**os.environ, "DETHPC_TRIAL_DIR": str(trial), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGUSR2)
    assert proc.wait(timeout=120) == EXIT_PREEMPTED


class _FakeRank1(core.DistributedContext):
    """Rank 1 of 2 whose broadcast delivers what 'rank 0' decided."""

    def __init__(self, chief_says: object) -> None:
        super().__init__(rank=1, size=2)
        self.chief_says = chief_says
        self.broadcasts = 0

    def broadcast(self, obj):  # type: ignore[no-untyped-def]
        assert obj is None  # a non-chief rank contributes nothing
        self.broadcasts += 1
        return self.chief_says


def test_rank0_answer_is_broadcast(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    (trial / "stop").write_text("stop")  # rank 1 must not act on its own view
    dist = _FakeRank1(None)
    with core.init(env=_env(trial), distributed=dist, stop_check_interval_s=0) as ctx:
        assert ctx.preempt.should_preempt() is False
        dist.chief_says = "signal"
        assert ctx.preempt.should_preempt() is True
        assert ctx.preempt.reason == "signal"
        ctx.preempt._reason = None  # forget, then a chief "pause" is seen as pause
        dist.chief_says = "pause"
        assert ctx.preempt.should_preempt() and ctx.preempt.reason == "pause"
        ctx.preempt._acknowledged = False
    assert dist.broadcasts == 3


def test_a_check_touches_the_heartbeat_at_most_every_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hang watchdog's sign of life: ``should_preempt`` touches the trial's
    ``heartbeat`` file, at most every ``HEARTBEAT_S`` (one utime, not one per step)."""
    from dethpc.core import _preempt

    clock = [100.0]
    monkeypatch.setattr(_preempt.time, "monotonic", lambda: clock[0])
    trial = _trial(tmp_path)
    beat = trial / "heartbeat"
    with core.init(env=_env(trial), exit_on_preempt=False) as ctx:
        ctx.preempt.should_preempt()
        assert beat.exists()
        os.utime(beat, (1, 1))
        clock[0] += _preempt.HEARTBEAT_S / 2
        ctx.preempt.should_preempt()
        assert beat.stat().st_mtime == 1                 # too soon: untouched
        clock[0] += _preempt.HEARTBEAT_S
        ctx.preempt.should_preempt()
        assert beat.stat().st_mtime > 1


def test_the_stack_dump_signal_writes_every_threads_stack(tmp_path: Path) -> None:
    """A trial process stuck in a sleep loop writes its Python stacks to stderr (the trial
    log) on the watchdog's signal, and goes on (it is not killed by it)."""
    from dethpc.common.jobenv import STACK_DUMP_SIGNAL

    trial = _trial(tmp_path)
    code = ("import time, dethpc.core\n"
            "with dethpc.core.init() as ctx:\n"
            "    def stuck_here():\n"
            "        print('ready', flush=True)\n"
            "        while True:\n"
            "            time.sleep(0.1)\n"
            "    stuck_here()\n")
    err_path = tmp_path / "stderr"
    with err_path.open("w") as err_file:
        p = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **_env(trial)},
                             stdout=subprocess.PIPE, stderr=err_file, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        p.send_signal(parse_signal(STACK_DUMP_SIGNAL))
        deadline = time.monotonic() + 60     # a loaded machine schedules it late
        while "in stuck_here" not in err_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert p.poll() is None, "the dump signal ended the process"
    finally:
        p.kill()
        p.communicate(timeout=30)
    err = err_path.read_text()
    assert "most recent call first" in err and "in stuck_here" in err, err


@pytest.mark.parametrize(("content", "reason", "code"), [
    ("stop", "stop", EXIT_STOPPED),        # the searcher's stop: decided, not requeued
    ("pause", "signal", EXIT_PREEMPTED),   # a pause resumes either way: the signal's
    (None, "signal", EXIT_PREEMPTED),      # no stop file: preempted
])
def test_a_signal_after_the_searchers_stop_leaves_stopped(
        tmp_path: Path, content: str | None, reason: str, code: int) -> None:
    """Issue 48: a trial preempted after its rung's stop was written (it was saving the
    rung's checkpoint) left preempted, was requeued and ran again one step to be stopped;
    the stop file is read when the signal is seen, whatever the check interval."""
    trial = _trial(tmp_path)
    with core.init(env=_env(trial), stop_check_interval_s=3600,
                   exit_on_preempt=False) as ctx:
        assert ctx.preempt.should_preempt() is False     # the interval starts here
        if content is not None:
            (trial / "stop").write_text(content)
        os.kill(os.getpid(), signal.SIGUSR2)
        assert ctx.preempt.should_preempt() is True
        assert ctx.preempt.reason == reason
    assert ctx.preempt.exit_code() == code
