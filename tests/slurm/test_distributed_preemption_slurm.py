"""Issue 15 item 2: a distributed trial survives preemption. A 2-node x 2-rank torch
DDP trial (the preemption fixture trial under ``dethpc.launch.torch_distributed``, srun
and torchrun modes; ``find_unused_parameters=True`` so that DDP keeps one gradient
bucket order) in the preemptible ``low`` partition is preempted by a ``high`` job on one
of its nodes: the 4 ranks are one process group, every rank stops at the same agreed
step (rank 0 decides, all follow), the checkpoint is complete, the job is requeued and
resumes (possibly on other nodes), and its final weights equal those of the same 2x2
trial run uninterrupted in ``debug``. The preemption is not counted.

History: this test once passed while each rank trained alone (the fixture called
``dethpc.core.init()`` without ``distributed=``: 4 one-process trials, identical by
seed); under load their steps drifted apart (19, 19, 19, 20). The fixture now builds
the process group, the records carry the world size, and a one-process context under
``WORLD_SIZE`` > 1 is an error (``dethpc.pytorch._trial.check_world``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.fixtures.harness import (
    DaemonHarness,
    assert_bit_identical,
    experiment_yaml,
    preempt,
    read_jsonl,
)

BATCHES = 200
HPARAMS = {"step_time": 0.1}


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc", slots_per_node=2)
    yield h
    h.cancel_all_experiments()


def ddp(mode: str, pool: str) -> dict[str, Any]:
    raw = experiment_yaml(batches=BATCHES, pool=pool, hparams=HPARAMS)
    raw["entrypoint"] = (f"python3 -m dethpc.launch.torch_distributed --mode {mode} -- "
                         f"python3 train.py --batches {BATCHES}")
    raw["resources"] = {"resource_pool": pool, "slots_per_trial": 4}
    raw["name"] = f"ddp-{mode}-{pool}"
    return raw


@pytest.mark.parametrize("mode", ["srun", "torchrun"])
def test_2x2_ddp_trial_preempted_resumes_bit_identical(harness: DaemonHarness,
                                                       slurm_cluster: Any, mode: str) -> None:
    exp = harness.submit(ddp(mode, "low"))
    ref_exp = harness.submit(ddp(mode, "debug"))
    ref = harness.wait("the trial's job to run", lambda: harness.job_ref(exp) if subprocess.run(
        ["squeue", "-h", "-j", harness.job_ref(exp) or "0", "-o", "%T"], capture_output=True,
        text=True).stdout.strip() == "RUNNING" else None, timeout=300)
    trial_dir = harness.trial_dir(exp)
    harness.wait("two checkpoints", lambda: len(list(harness.ckpt_dir(exp).glob("*"))) >= 2,
                 timeout=300)
    # a high job on the trial's first node that can start only by preempting it
    sent = preempt(ref, lambda: bool(read_jsonl(trial_dir / "runs.jsonl")),
                   cpus_on_node=2)
    try:
        done = harness.wait_done(exp, timeout=600)
        reference = harness.wait_done(ref_exp, timeout=600)
    finally:
        slurm_cluster.cancel(*sent)
    runs = read_jsonl(trial_dir / "runs.jsonl")
    by_run: dict[int, list[dict[str, Any]]] = {}
    for r in runs:
        by_run.setdefault(r["run"], []).append(r)
    print(f"2x2 {mode}: {done.state}; runs " + "; ".join(
        f"run {k}: {[(r['batches_done'], r['preempted']) for r in v]}"
        for k, v in sorted(by_run.items())))
    assert done.state == "COMPLETED" and reference.state == "COMPLETED", harness.events(exp)
    trial = harness.trial(exp)
    assert trial.restarts == 0 and trial.steps_completed == BATCHES, trial
    first = by_run[0]
    # one process group of 4 (before the fix each rank trained alone, world 1)
    assert sorted((r["rank"], r["world"]) for r in runs) == [
        (rank, 4) for rank in range(4) for _ in by_run], runs
    assert len(first) == 4 and all(r["preempted"] for r in first), first   # every rank
    assert len({r["batches_done"] for r in first}) == 1, first             # at one step
    assert len(by_run) >= 2 and not any(r["preempted"] for r in by_run[max(by_run)])
    assert_bit_identical(trial_dir / "final_weights.pt",
                         harness.trial_dir(ref_exp) / "final_weights.pt")
