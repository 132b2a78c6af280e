"""Issue 15 item 2 (DeepSpeed part): a DeepSpeed ZeRO-1 trial with sharded checkpoints
survives preemption and a rank that dies in the middle of a checkpoint.

The fixture (``fixtures/ds_trial/train.py``) runs 2 ranks on 2 nodes through
``dethpc.launch.deepspeed`` and checkpoints with ``store_path(shard=True)``: every
rank writes its ZeRO-1 optimizer shard into one directory, published only when all
ranks succeeded.

1. In ``low``, preempted by a ``high`` job on one of its nodes: both ranks stop at one
   agreed step, the checkpoint written there holds the model states, both optimizer
   shards and ``metadata.json``, the job is requeued (not counted as a restart),
   resumes and ends with weights bit-identical to the same trial run uninterrupted
   in ``debug``.
2. Rank 1 SIGKILLs itself half-way through its shard of the 2nd checkpoint (run 0
   only): that checkpoint is never published, the next run (a counted restart)
   resumes from the 1st and the trial completes.
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
    job_log,
    preempt,
    read_jsonl,
)

DS_TRIAL = Path(__file__).parent / "fixtures" / "ds_trial"
STEPS = 60
PERIOD = 10
SHARDS = ["ds/mp_rank_00_model_states.pt", "ds/zero_pp_rank_0_mp_rank_00_optim_states.pt",
          "ds/zero_pp_rank_1_mp_rank_00_optim_states.pt"]

def ds(pool: str, hparams: dict[str, Any], max_restarts: int = 3) -> dict[str, Any]:
    raw = experiment_yaml(batches=STEPS, pool=pool, max_restarts=max_restarts,
                          hparams={"checkpoint_period": PERIOD, **hparams})
    raw["entrypoint"] = ("python3 -m dethpc.launch.deepspeed -- "
                         f"python3 train.py --steps {STEPS}")
    raw["resources"] = {"resource_pool": pool, "slots_per_trial": 2}
    raw["name"] = f"ds-zero1-{pool}"
    return raw


def by_run(runs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """runs.jsonl lines grouped per run (job id, restart count), in order."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["job"], r["run"]), []).append(r)
    return list(groups.values())


def test_zero1_trial_preempted_stops_together_and_resumes_bit_identical(
        ds_harness: DaemonHarness, slurm_cluster: Any) -> None:
    t0 = time.monotonic()
    exp = ds_harness.submit(ds("low", {"step_time": 0.4}), DS_TRIAL)
    ref_exp = ds_harness.submit(ds("debug", {}), DS_TRIAL)
    ref = ds_harness.wait(
        "the trial's job to run", lambda: ds_harness.job_ref(exp) if slurm_cluster.squeue_field(
            ds_harness.job_ref(exp) or "0", "%T") == "RUNNING" else None,
        timeout=300)
    trial_dir = ds_harness.trial_dir(exp)
    ds_harness.wait("a first checkpoint", lambda: checkpoints(ds_harness.ckpt_dir(exp)),
                    timeout=300)
    # a high job on the trial's first node that can start only by preempting it
    sent = preempt(ref, lambda: bool(read_jsonl(trial_dir / "runs.jsonl")),
                   cpus_on_node=1)
    try:
        done = ds_harness.wait_done(exp, timeout=400)
        reference = ds_harness.wait_done(ref_exp, timeout=400)
    finally:
        slurm_cluster.cancel(*sent)
    runs = by_run(read_jsonl(trial_dir / "runs.jsonl"))
    print(f"ZeRO-1 2x1 preempted: {done.state} in {time.monotonic() - t0:.0f} s; runs " +
          "; ".join(str([(r["host"], r["first_step"], r["steps_done"], r["preempted"])
                         for r in run]) for run in runs))
    assert done.state == "COMPLETED" and reference.state == "COMPLETED", ds_harness.events(exp)
    trial = ds_harness.trial(exp)
    assert trial.restarts == 0 and trial.steps_completed == STEPS, trial
    first = runs[0]
    assert len(first) == 2 and all(r["preempted"] for r in first), first   # every rank
    stop = {r["steps_done"] for r in first}
    assert len(stop) == 1, first                                           # at one step
    assert 0 < stop.pop() < STEPS
    assert len(runs) >= 2 and not any(r["preempted"] for r in runs[-1]), runs
    assert {r["run"] for r in runs[-1]} != {0} and runs[-1][0]["job"] == ref.split("_")[0]
    # the checkpoint written at the preemption: every rank's shard, then metadata.json
    at_stop = [c for c in checkpoints(ds_harness.ckpt_dir(exp))
               if c["steps_completed"] == first[0]["steps_done"]]
    assert at_stop and all(s in at_stop[0]["files"] for s in SHARDS), at_stop
    assert runs[1][0]["first_step"] == first[0]["steps_done"], runs
    assert_bit_identical(trial_dir / "final_weights.pt",
                         ds_harness.trial_dir(ref_exp) / "final_weights.pt")


def test_rank_dying_mid_shard_resumes_from_the_previous_checkpoint(
        ds_harness: DaemonHarness) -> None:
    t0 = time.monotonic()
    exp = ds_harness.submit(ds("debug", {"step_time": 0.05, "die_at_checkpoint": 2},
                               max_restarts=1), DS_TRIAL)
    done = ds_harness.wait_done(exp, timeout=400)
    trial_dir = ds_harness.trial_dir(exp)
    ckpt_dir = ds_harness.ckpt_dir(exp)
    runs = by_run(read_jsonl(trial_dir / "runs.jsonl"))
    exits = read_jsonl(trial_dir / "exits.jsonl")
    print(f"ZeRO-1 rank death mid-shard: {done.state} in {time.monotonic() - t0:.0f} s; "
          f"exits {[(e['reason'], e['code']) for e in exits]}; runs {runs}")
    assert done.state == "COMPLETED", ds_harness.events(exp)
    assert "rank 1 dies half-way through" in job_log(trial_dir)
    trial = ds_harness.trial(exp)
    assert trial.restarts == 1 and trial.steps_completed == STEPS, trial  # the death counts
    assert [e["reason"] for e in exits] == ["error", "completed"], exits
    # the crashed run wrote no record; the next one resumed from checkpoint 1 (step 10),
    # not from the half-written checkpoint 2 (step 20)
    assert len(runs) == 1 and len(runs[0]) == 2, runs
    assert {(r["first_step"], r["steps_done"]) for r in runs[0]} == {(PERIOD, STEPS)}, runs
    # rank 0 removes the partial directory when it learns of the death; killed first, it
    # leaves it without metadata.json (never loaded)
    partial = list(ckpt_dir.glob(".tmp-*"))
    assert partial or "not published: rank 1 closed the connection" in job_log(trial_dir)
    assert all(not (p / "metadata.json").exists() for p in partial), partial
    done_steps = [c["steps_completed"] for c in checkpoints(ckpt_dir)]
    assert done_steps == list(range(PERIOD, STEPS + 1, PERIOD)), done_steps  # 20 once
    assert all(all(s in c["files"] for s in SHARDS) for c in checkpoints(ckpt_dir))
