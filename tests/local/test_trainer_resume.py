"""The key property: a trial preempted k times ends bit-identical to an uninterrupted one.

Runs examples/digits (a subclass that also draws python/numpy randomness, uses
dropout and an LR scheduler, and sleeps a little per batch so that the test can
signal it mid-run) as real subprocesses with a trial directory, sends the
preemption signal, checks exit code 80 and that no finished step is lost, restarts
with SLURM_RESTART_COUNT=n, and compares every final parameter with torch.equal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dethpc.common.exitcodes import EXIT_PREEMPTED, EXIT_STOPPED  # noqa: E402
from dethpc.core import CheckpointContext, DistributedContext  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits"
LENGTH = 160

SLOW_TRIAL = '''
import os, random, time
import numpy as np
import torch
from model_def import DigitsTrial
from dethpc.pytorch import StepMode

class SlowDigits(DigitsTrial):
    def __init__(self, context):
        super().__init__(context)
        sched = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=25, gamma=0.7)
        self.sched = context.wrap_lr_scheduler(sched, StepMode.STEP_EVERY_BATCH)
        self.sleep = float(os.environ.get("SLOW_S", "0"))

    def train_batch(self, batch, epoch_idx, batch_idx):
        time.sleep(self.sleep)
        x, y = batch
        noise = torch.tensor(np.random.randn(*x.shape) * 0.01, dtype=x.dtype)
        x = x + noise * random.random()
        return super().train_batch((x, y), epoch_idx, batch_idx)
'''

HPARAMS = {"lr": 0.01, "hidden_size": 32, "dropout": 0.2, "optimizer": "adam",
           "global_batch_size": 16}


def _trial_dir(root: Path) -> Path:
    trial = root / "exp" / "trials" / "1"
    trial.mkdir(parents=True)
    (trial / "hparams.json").write_text(json.dumps(HPARAMS))
    (trial / "target.json").write_text(json.dumps(
        {"unit": "batches", "length": LENGTH, "validate_at": [40, LENGTH]}))
    return trial


def _env(tmp_path: Path, trial: Path, restart: int, slow: float) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(DIGITS), str(REPO)]),
        "DETHPC_TRIAL_DIR": str(trial), "DETHPC_TRIAL_ID": "1", "DETHPC_EXPERIMENT_ID": "1",
        "DETHPC_TRIAL_SEED": "1234", "SLURM_RESTART_COUNT": str(restart),
        "DETHPC_PREEMPT_SIGNAL": "USR2", "SLOW_S": str(slow), "DIGITS_THREADS": "1",
    })
    env.pop("DETHPC_RUN_ID", None)
    return env


def _argv() -> list[str]:
    return [sys.executable, "-m", "dethpc.pytorch.run", "slow_digits:SlowDigits"]


def _records(trial: Path) -> list[dict]:
    path = trial / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines(keepends=True)
            if line.endswith("\n")]


def _final_state(trial: Path) -> dict:
    ckpts = CheckpointContext(trial / "checkpoints", DistributedContext())
    uuid = ckpts.latest()
    assert uuid is not None
    assert ckpts.info(uuid).steps_completed == LENGTH
    return torch.load(trial / "checkpoints" / uuid / "state.pt", weights_only=False)


def _wait_for_training_past(proc: subprocess.Popen, trial: Path, steps: int) -> int:
    """Block until a training record with more than ``steps`` appears (or the process ends)."""
    deadline = time.monotonic() + 300  # a hang guard, not an assertion on speed
    while time.monotonic() < deadline:
        seen = [r["steps"] for r in _records(trial) if r["kind"] == "training"]
        if seen and max(seen) > steps:
            return max(seen)
        if proc.poll() is not None:
            pytest.fail(f"trial exited with {proc.returncode} before reaching step {steps}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail("trial made no progress")


@pytest.mark.torch
def test_preempted_three_times_is_bit_identical(tmp_path: Path) -> None:
    (tmp_path / "slow_digits.py").write_text(SLOW_TRIAL)
    reference = _trial_dir(tmp_path / "ref")
    done = subprocess.run(_argv(), cwd=DIGITS, env=_env(tmp_path, reference, 0, 0.0),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]

    trial = _trial_dir(tmp_path / "pre")
    resumed_from = 0
    for restart in range(3):
        proc = subprocess.Popen(_argv(), cwd=DIGITS, env=_env(tmp_path, trial, restart, 0.03),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        reported = _wait_for_training_past(proc, trial, resumed_from + 10)
        proc.send_signal(signal.SIGUSR2)
        out, _ = proc.communicate()
        assert proc.returncode == EXIT_PREEMPTED, out[-3000:]
        ckpt = [r for r in _records(trial) if r["kind"] == "checkpoint"][-1]
        # the checkpoint holds every step reported before the signal: nothing lost
        assert ckpt["steps"] >= reported
        assert resumed_from < ckpt["steps"] < LENGTH
        if restart:
            assert "resumed from checkpoint" in out
        resumed_from = ckpt["steps"]

    last = subprocess.run(_argv(), cwd=DIGITS, env=_env(tmp_path, trial, 3, 0.0),
                          capture_output=True, text=True)
    assert last.returncode == 0, last.stderr[-3000:]

    ref_state, got_state = _final_state(reference), _final_state(trial)
    for (name, ref), (name2, got) in zip(ref_state["models_state_dict"][0].items(),
                                         got_state["models_state_dict"][0].items(), strict=True):
        assert name == name2
        assert torch.equal(ref, got), f"parameter {name} differs after resume"
    assert ref_state["lr_schedulers_state_dict"] == got_state["lr_schedulers_state_dict"]
    ref_val = [r for r in _records(reference) if r["kind"] == "validation"]
    got_val = [r for r in _records(trial) if r["kind"] == "validation"]
    assert ref_val[-1]["metrics"] == got_val[-1]["metrics"]
    assert [r["steps"] for r in ref_val] == [40, LENGTH]
    # each training step appears in exactly one run: training records never go backwards
    steps = [r["steps"] for r in _records(trial) if r["kind"] == "training"]
    assert steps == sorted(steps) and steps[-1] == LENGTH


@pytest.mark.torch
@pytest.mark.parametrize("content", ["stop", "pause"])
def test_stop_file_checkpoints_and_exits_81(tmp_path: Path, content: str) -> None:
    (tmp_path / "slow_digits.py").write_text(SLOW_TRIAL)
    trial = _trial_dir(tmp_path / "stop")
    env = _env(tmp_path, trial, 0, 0.03)
    proc = subprocess.Popen(_argv(), cwd=DIGITS, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    reported = _wait_for_training_past(proc, trial, 10)
    (trial / "stop").write_text(content)
    out, _ = proc.communicate()
    assert proc.returncode == EXIT_STOPPED, out[-3000:]
    ckpt = [r for r in _records(trial) if r["kind"] == "checkpoint"][-1]
    assert reported <= ckpt["steps"] < LENGTH
    assert f"({content})" in out
