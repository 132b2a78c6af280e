"""Issue 45 item 3: Determined's DeepSpeed Trial API on 2 ranks on 2 dev-cluster nodes,
preempted and resumed with the same losses as an uninterrupted run.

The fixture (``fixtures/deepspeed_trial/model_def.py``, a ``DeepSpeedTrial`` written as
Determined's documentation shows, CPU DeepSpeed, ZeRO 1) runs as Determined runs it:
``python3 -m dethpc.launch.deepspeed --trial model_def:TinyDeepSpeedTrial`` on
``slots_per_trial: 2`` with one slot per node, so the two ranks are two Slurm tasks on
two nodes, one process group over gloo.

In ``low`` it is preempted by a ``high`` job on its first node after its first
checkpoint: both ranks stop at one batch boundary, the checkpoint written there holds
both ranks' ZeRO-1 optimizer shards, the job is requeued (not counted as a restart) and
resumes from that checkpoint. Each rank's loss at every batch, the validation losses
and the final weights then equal those of the same trial (same seed) run
uninterrupted in ``debug``, bit for bit, and no batch is trained twice.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.slurm.fixtures.harness import (
    DaemonHarness,
    assert_bit_identical,
    checkpoints,
    experiment_yaml,
    preempt,
    read_jsonl,
)

TRIAL = Path(__file__).parent / "fixtures" / "deepspeed_trial"
BATCHES = 40        # 5 epochs of 8 batches per rank (64 points, 4 per micro batch, 2 ranks)
PERIOD = 8
SHARDS = ["model0/mp_rank_00_model_states.pt",
          "model0/zero_pp_rank_0_mp_rank_00_optim_states.pt",
          "model0/zero_pp_rank_1_mp_rank_00_optim_states.pt"]

def ds_trial(pool: str, step_time: float) -> dict[str, Any]:
    raw = experiment_yaml(batches=BATCHES, pool=pool, checkpoint_period=PERIOD,
                          hparams={"seed": 7, "lr": 0.02, "step_time": step_time})
    raw["entrypoint"] = "python3 -m dethpc.launch.deepspeed --trial model_def:TinyDeepSpeedTrial"
    raw["resources"] = {"resource_pool": pool, "slots_per_trial": 2}
    raw["min_validation_period"] = {"batches": PERIOD}
    raw["searcher"]["metric"] = "val_loss"
    raw["name"] = f"ds-trial-api-{pool}"
    return raw


def losses(trial_dir: Path, rank: int) -> list[dict[str, Any]]:
    return read_jsonl(trial_dir / f"losses.rank{rank}.jsonl")


def per_batch(lines: list[dict[str, Any]]) -> dict[int, float]:
    """batch -> loss; a batch trained twice (a resume from before the stop) fails."""
    out: dict[int, float] = {}
    for line in lines:
        assert line["batch"] not in out, f"batch {line['batch']} trained twice: {lines}"
        out[line["batch"]] = line["loss"]
    return out


def validations(trial_dir: Path) -> dict[int, float]:
    """The reported validation loss at every validation, from metrics.jsonl."""
    return {m["steps"]: m["metrics"]["val_loss"] for m in read_jsonl(trial_dir / "metrics.jsonl")
            if m["kind"] == "validation"}


def test_deepspeed_trial_2x1_preempted_resumes_with_the_same_losses(
        ds_harness: DaemonHarness, slurm_cluster: Any) -> None:
    t0 = time.monotonic()
    exp = ds_harness.submit(ds_trial("low", 0.5), TRIAL)   # 16 s after the 1st checkpoint
    ref_exp = ds_harness.submit(ds_trial("debug", 0.0), TRIAL)
    ref = ds_harness.wait(
        "the trial's job to run", lambda: ds_harness.job_ref(exp) if slurm_cluster.squeue_field(
            ds_harness.job_ref(exp) or "0", "%T") == "RUNNING" else None,
        timeout=300, story_of=exp)
    trial_dir = ds_harness.trial_dir(exp)
    ds_harness.wait("a first checkpoint", lambda: checkpoints(ds_harness.ckpt_dir(exp)),
                    timeout=300, story_of=exp)
    # a high job on the trial's first node that can start only by preempting it
    sent = preempt(ref, lambda: bool(read_jsonl(trial_dir / "runs.jsonl")), cpus_on_node=1)
    try:
        done = ds_harness.wait_done(exp, timeout=400)
        reference = ds_harness.wait_done(ref_exp, timeout=400)
    finally:
        slurm_cluster.cancel(*sent)
    runs = read_jsonl(trial_dir / "runs.jsonl")
    print(f"DeepSpeedTrial 2x1 preempted: {done.state} in {time.monotonic() - t0:.0f} s; "
          "runs " + str([(r["run"], r["rank"], r["node"], r["first_batch"], r["batches"])
                         for r in runs]))
    assert done.state == "COMPLETED", ds_harness.story(exp)
    assert reference.state == "COMPLETED", ds_harness.story(ref_exp)
    trial = ds_harness.trial(exp)
    assert trial.restarts == 0 and trial.steps_completed == BATCHES, trial

    # two ranks, one world of 2, on two nodes, in every run
    assert {(r["rank"], r["world"]) for r in runs} == {(0, 2), (1, 2)}, runs
    by_run: dict[int, list[dict[str, Any]]] = {}
    for r in runs:
        by_run.setdefault(r["run"], []).append(r)
    for run in by_run.values():
        assert len(run) == 2 and len({r["node"] for r in run}) == 2, run
    # the first run stopped both ranks at one batch, mid-training; the last one finished
    first, last = by_run[min(by_run)], by_run[max(by_run)]
    stop = {r["batches"] for r in first}
    assert len(stop) == 1 and PERIOD <= next(iter(stop)) < BATCHES, first
    assert {r["batches"] for r in last} == {BATCHES} and len(by_run) >= 2, runs
    assert last[0]["job"] == ref.split("_")[0]   # the same job, requeued
    # the checkpoint written at the stop: both ranks' optimizer shards
    at_stop = [c for c in checkpoints(ds_harness.ckpt_dir(exp))
               if c["steps_completed"] == next(iter(stop))]
    assert at_stop and all(s in at_stop[0]["files"] for s in SHARDS), at_stop

    # every rank's loss at every batch, as the uninterrupted run's, each batch once
    ref_dir = ds_harness.trial_dir(ref_exp)
    for rank in (0, 1):
        got, want = per_batch(losses(trial_dir, rank)), per_batch(losses(ref_dir, rank))
        assert sorted(want) == list(range(BATCHES)), sorted(want)
        assert got == want, {b: (got.get(b), want[b]) for b in want if got.get(b) != want[b]}
        assert len({line["run"] for line in losses(trial_dir, rank)}) >= 2
    assert per_batch(losses(trial_dir, 0)) != per_batch(losses(trial_dir, 1))  # own shards
    assert validations(trial_dir) == validations(ref_dir)
    assert sorted(validations(ref_dir)) == list(range(PERIOD, BATCHES + 1, PERIOD))
    # and the final weights, on both ranks
    ref_runs = read_jsonl(ref_dir / "runs.jsonl")
    assert {(r["run"], r["batches"]) for r in ref_runs} == {(0, BATCHES)}, ref_runs
    for rank in (0, 1):
        assert_bit_identical(trial_dir / f"weights.run{last[0]['run']}.rank{rank}.pt",
                             ref_dir / f"weights.run0.rank{rank}.pt")
