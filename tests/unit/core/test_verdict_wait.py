"""A trial at a rung waits for the searcher's verdict (``PreemptContext.await_verdict``):
after reporting a validation at a rung, its next ``should_preempt()`` returns once the
daemon's ``searched`` marker reaches that length (False: train on) or the stop file
appears (True: the stop lands at the rung), at most ``$DETHPC_VERDICT_WAIT_S``.
Real files; a thread plays the daemon."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest

from dethpc.core._context import build_context
from dethpc.core._distributed import DistributedContext
from dethpc.core._preempt import (
    VERDICT_WAIT_S,
    PreemptContext,
    PreemptMode,
    rung_hook,
    verdict_wait_s,
)


def ctx(tmp_path: Path, wait: float = 30.0) -> PreemptContext:
    return PreemptContext(DistributedContext(), stop_file=tmp_path / "stop",
                          mode=PreemptMode.ChiefOnly, searched_file=tmp_path / "searched",
                          verdict_wait=wait)


def later(fn: object, started: threading.Event) -> threading.Thread:
    """Run ``fn`` once ``started`` is set (the wait has begun), from another thread."""
    def run() -> None:
        started.wait(30)
        time.sleep(0.05)
        fn()  # type: ignore[operator]
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize(("validate_at", "length", "waits_at"), [
    ((32, 128, 512), 512, {32, 128}),     # the last rung is the end: no wait
    ((512,), 512, set()),
    ((), 512, set()),
    ((16, 64), 100, {16, 64}),
])
def test_rung_hook_waits_only_at_rungs_short_of_the_end(
        tmp_path: Path, validate_at: tuple[int, ...], length: int, waits_at: set[int]) -> None:
    p = ctx(tmp_path)
    hook = rung_hook(validate_at, length, p)
    assert (hook is None) == (not waits_at)
    for steps in (16, 32, 64, 96, 128, 512):
        p._awaiting = None
        if hook is not None:
            hook(steps)
        assert (p._awaiting == steps) == (steps in waits_at)


@pytest.mark.parametrize(("raw", "seconds"), [
    (None, VERDICT_WAIT_S), ("", VERDICT_WAIT_S), ("0", 0.0), ("5.5", 5.5),
    ("-1", 0.0), ("soon", VERDICT_WAIT_S)])
def test_verdict_wait_s(raw: str | None, seconds: float) -> None:
    assert verdict_wait_s(raw) == seconds


def test_a_continue_verdict_ends_the_wait_and_training_goes_on(tmp_path: Path) -> None:
    p = ctx(tmp_path)
    p.await_verdict(32)
    started = threading.Event()
    (tmp_path / "searched").write_text("16\n")        # an older verdict does not count
    t = later(lambda: (tmp_path / "searched").write_text("32\n"), started)
    t0 = time.monotonic()
    started.set()
    assert p.should_preempt() is False
    assert time.monotonic() - t0 < 30.0, "waited out the bound: the marker was not seen"
    assert (tmp_path / "searched").read_text() == "32\n"
    t.join(5)


def test_a_stop_decided_on_the_rung_lands_at_the_rung(tmp_path: Path) -> None:
    p = ctx(tmp_path)
    p.await_verdict(32)
    started = threading.Event()
    later(lambda: (tmp_path / "stop").write_text("stop"), started)
    started.set()
    t0 = time.monotonic()
    assert p.should_preempt() is True
    assert time.monotonic() - t0 < 30.0
    assert p.reason == "stop" and p.exit_code() == 81


def test_without_a_verdict_the_wait_ends_at_its_bound(tmp_path: Path) -> None:
    # a bound well above what one check costs on a loaded machine: the second check
    # must not wait it again
    p = ctx(tmp_path, wait=1.5)
    p.await_verdict(32)
    t0 = time.monotonic()
    assert p.should_preempt() is False
    assert time.monotonic() - t0 >= 1.5
    t0 = time.monotonic()
    assert p.should_preempt() is False                 # waited once, not at every check
    assert time.monotonic() - t0 < 1.5


def test_no_wait_when_turned_off_or_the_marker_is_already_there(tmp_path: Path) -> None:
    off = ctx(tmp_path, wait=0.0)
    off.await_verdict(32)
    assert off._awaiting is None
    (tmp_path / "searched").write_text("64\n")
    p = ctx(tmp_path, wait=30.0)
    p.await_verdict(32)
    t0 = time.monotonic()
    assert p.should_preempt() is False
    assert time.monotonic() - t0 < 30.0


def test_the_core_context_waits_after_a_validation_at_a_rung(tmp_path: Path) -> None:
    """``dethpc.core``'s context wires it: the target's rungs, the trial's marker."""
    trial = tmp_path / "trial"
    trial.mkdir()
    (trial / "target.json").write_text(json.dumps(
        {"unit": "batches", "length": 512, "validate_at": [32, 128, 512]}))
    (trial / "hparams.json").write_text("{}")
    env = {"DETHPC_TRIAL_DIR": str(trial), "DETHPC_TRIAL_ID": "1",
           "DETHPC_EXPERIMENT_ID": "1", "DETHPC_VERDICT_WAIT_S": "1.5"}
    core = build_context(env=env, exit_on_preempt=False)
    core.train.report_validation_metrics(64, {"validation_loss": 1.0})   # not a rung
    t0 = time.monotonic()
    assert core.preempt.should_preempt() is False
    assert time.monotonic() - t0 < 1.5
    core.train.report_validation_metrics(32, {"validation_loss": 1.0})   # a rung
    t0 = time.monotonic()
    assert core.preempt.should_preempt() is False
    assert time.monotonic() - t0 >= 1.5                                 # no daemon: bound
    (trial / "stop").write_text("stop")
    core.train.report_validation_metrics(128, {"validation_loss": 1.0})
    assert core.preempt.should_preempt() is True


def test_a_signal_at_a_rung_still_waits_for_the_verdict(tmp_path: Path) -> None:
    """Issue 48: the preemption's signal does not cut the wait short: a stop decided on
    the rung's validation lands as a stop (81, decided), not a preemption that is requeued
    and resumed only to be stopped."""
    p = ctx(tmp_path)
    p.await_verdict(32)
    p._on_signal(int(signal.SIGUSR2), None)          # the signal came while it saved
    started = threading.Event()
    later(lambda: (tmp_path / "stop").write_text("stop"), started)
    started.set()
    t0 = time.monotonic()
    assert p.should_preempt() is True
    assert time.monotonic() - t0 < 30.0
    assert p.reason == "stop" and p.exit_code() == 81


def test_a_signal_at_a_rung_with_a_continue_verdict_is_a_preemption(tmp_path: Path) -> None:
    p = ctx(tmp_path)
    p.await_verdict(32)
    p._on_signal(int(signal.SIGUSR2), None)
    started = threading.Event()
    later(lambda: (tmp_path / "searched").write_text("32\n"), started)
    started.set()
    t0 = time.monotonic()
    assert p.should_preempt() is True
    assert time.monotonic() - t0 < 30.0
    assert p.reason == "signal" and p.exit_code() == 80
