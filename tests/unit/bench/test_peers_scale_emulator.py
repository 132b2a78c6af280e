"""bench/peers_scale/emulator: the emulated trial replays a recorded curve with real sleeps
and real state files, and its log counts a real SIGKILL's redone work exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.peers_scale.emulator import (
    CURVES,
    STATE_FILE,
    EmulatorSpec,
    ProcessState,
    TrialEmulator,
    load_curves,
)
from bench.peers_scale.worklog import EndReason, WorkLog, count_work, read_log

REPO = Path(__file__).resolve().parents[3]
#: a spec that runs in milliseconds: the recorded ~1 s steps scaled by 1/1000
FAST = EmulatorSpec(startup_s=0.0, time_scale=0.001, save_s=0.0, load_s=0.0, state_bytes=64)


def test_the_long_cnn_curves_are_replayed_step_by_step() -> None:
    curves = load_curves()
    assert CURVES.name == "curves_cnn_long.json" and len(curves) == 128
    c = curves[0]
    assert c.steps == 64 and c.units_per_step == 128
    assert all(s > 0 for s in c.step_s) and abs(sum(c.step_s) - 54.97) < 0.01


def test_a_run_sleeps_the_recorded_seconds_and_logs_every_step(tmp_path: Path) -> None:
    curve = load_curves()[5]
    slept: list[float] = []
    spec = EmulatorSpec(startup_s=10.0, time_scale=60.0, save_s=3.0, load_s=4.0)
    emu = TrialEmulator("t5", curve, WorkLog(tmp_path / "w.jsonl"), spec, run="r1",
                        sleep=slept.append, env={}, process=ProcessState())
    emu.start(client_import="json")
    for _ in range(3):
        emu.train_step()
    assert emu.validate() == curve.loss[2]
    ckpt = emu.save(tmp_path / "ckpt")
    emu.end(EndReason.PREEMPTED)
    # outside Slurm a cold process pays the container's half and the CUDA half
    assert slept == [5.0, 5.0, *(s * 60.0 for s in curve.step_s[:3]), curve.val_s * 60.0,
                     3.0]
    recs = read_log(tmp_path / "w.jsonl")
    assert [r["event"] for r in recs] == ["start", "ready", "step", "step", "step", "validate",
                                          "save", "end"]
    assert [r["step"] for r in recs if r["event"] == "step"] == [1, 2, 3]
    assert recs[-2]["ckpt"] == ckpt and recs[-1]["reason"] == "preempted"
    assert all(r["trial"] == "t5" and r["run"] == "r1" and r["wall"] > 0 for r in recs)
    # the next run restores the state file the first one wrote
    again = TrialEmulator("t5", curve, WorkLog(tmp_path / "w.jsonl"), spec, sleep=slept.append)
    assert again.restore(tmp_path / "ckpt") == 3 and slept[-1] == 4.0
    assert (tmp_path / "ckpt" / STATE_FILE).stat().st_size > spec.state_bytes


def test_a_state_file_of_another_trial_is_refused(tmp_path: Path) -> None:
    curves = load_curves()
    log = WorkLog(tmp_path / "w.jsonl")
    TrialEmulator("a", curves[0], log, FAST).save(tmp_path)
    with pytest.raises(ValueError, match="holds trial a"):
        TrialEmulator("b", curves[1], log, FAST).restore(tmp_path)


def test_the_client_import_is_real() -> None:
    emu = TrialEmulator("t", load_curves()[0], WorkLog(Path(os.devnull)), FAST)
    with pytest.raises(ModuleNotFoundError):
        emu.start(client_import="no_such_client_module_for_dethpc")


def test_bad_costs_are_refused() -> None:
    for kw in ({"startup_s": -1.0}, {"time_scale": 0.0}, {"state_bytes": -1},
               {"startup_s": 4.0, "container_s": 5.0}, {"container_s": -1.0}):
        with pytest.raises(ValueError):
            EmulatorSpec(**kw)  # type: ignore[arg-type]


CHILD = """
import sys
from pathlib import Path
from bench.peers_scale.emulator import EmulatorSpec, TrialEmulator, load_curves
from bench.peers_scale.worklog import WorkLog
spec = EmulatorSpec(startup_s=0.0, time_scale=0.05, save_s=0.0, load_s=0.0)
emu = TrialEmulator("k", load_curves()[0], WorkLog(Path(sys.argv[1])), spec, run="first")
emu.start()
while not emu.done:
    emu.train_step()
    if emu.step == 4:
        emu.save(Path(sys.argv[2]))
"""


def test_a_sigkilled_run_is_counted_exactly(tmp_path: Path) -> None:
    """A real process trains, checkpoints at step 4 and is SIGKILLed some steps later;
    the resumed run finishes. The redone steps are exactly those the first run executed
    after its checkpoint, whatever the moment of the kill."""
    log_path, ckpt = tmp_path / "work.jsonl", tmp_path / "ckpt"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(log_path), str(ckpt)],
                             cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until two steps past the checkpoint
            steps = [r["step"] for r in (read_log(log_path) if log_path.exists() else [])
                     if r["event"] == "step"]
            if steps and steps[-1] >= 6:
                break
            assert child.poll() is None, "the emulated trial ended before it was killed"
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    curve = load_curves()[0]
    emu = TrialEmulator("k", curve, WorkLog(log_path), FAST, run="second")
    emu.start()
    assert emu.restore(ckpt) == 4
    while not emu.done:
        emu.train_step()
    emu.end(EndReason.COMPLETED)
    records = read_log(log_path)
    first = [r["step"] for r in records if r["run"] == "first" and r["event"] == "step"]
    (work,) = count_work(records).trials
    assert work.decided and work.useful == curve.steps
    assert work.redone == len(first) - 4 >= 2 and work.lost == 0
