"""Issue 4, proof 3: requeues that are not the trial's fault are free; a crashed
node is not, and is counted against ``max_restarts`` — on the real dev cluster,
through the daemon.

* ``scancel --signal=USR2 --batch <job>`` (what a site's tooling or a user sends)
  and ``scontrol requeue <job>`` (an admin draining a node): the trial
  checkpoints at the next step boundary, the job is requeued under its id and
  resumes from that checkpoint; the daemon counts no restart.
* A node crash: every process of the trial's node dies by SIGKILL and the node
  is marked DOWN (what Slurm does after ``SlurmdTimeout``, or a site's health
  check at once); slurmctld ends the run NODE_FAIL and requeues the job; the
  trial resumes from its last periodic checkpoint on another node and the
  daemon counts one restart.

In every case the final weights are bit-identical to the uninterrupted run.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.fixtures.harness import (
    DaemonHarness,
    assert_bit_identical,
    checkpoints,
    crash_node,
    experiment_yaml,
    job_log,
    max_step,
    read_jsonl,
    revive_node,
    slurmd_pid,
    start_reference,
    steps_log,
    wait_until,
)

BATCHES = 160
HPARAMS = {"step_time": 0.1}
HOLD_AT = 35


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc")
    yield h
    h.cancel_all_experiments()


def run_started(trial_dir: Path, run: int, min_steps: int) -> bool:
    """Run ``run`` of the trial has trained ``min_steps`` batches in this run."""
    seen = [s for r, s in steps_log(trial_dir) if r == run]
    return len(seen) >= min_steps


@pytest.mark.spanning
def test_user_signal_and_manual_requeue_are_free(harness: DaemonHarness, tmp_path: Path) -> None:
    reference = start_reference(tmp_path / "reference.pt", BATCHES, HPARAMS)
    exp = harness.submit(experiment_yaml(batches=BATCHES, pool="debug", hparams=HPARAMS))
    ref = harness.wait("the trial's job", lambda: harness.job_ref(exp))
    trial_dir = harness.trial_dir(exp)

    harness.wait("run 0 to train", lambda: run_started(trial_dir, 0, 15), timeout=600)
    subprocess.run(["scancel", "--signal=USR2", "--batch", ref], check=True, timeout=30)
    harness.wait("run 0 to checkpoint and exit",
                 lambda: len(read_jsonl(trial_dir / "runs.jsonl")) == 1, timeout=120)
    harness.wait("run 1 to train", lambda: run_started(trial_dir, 1, 15), timeout=300)
    subprocess.run(["scontrol", "requeue", ref], check=True, timeout=30)
    harness.wait("run 1 to checkpoint and exit",
                 lambda: len(read_jsonl(trial_dir / "runs.jsonl")) == 2, timeout=120)
    done = harness.wait_done(exp, timeout=400)

    assert done.state == "COMPLETED", harness.story(exp)
    trial = harness.trial(exp)
    assert trial.restarts == 0, harness.story(exp)
    exits = read_jsonl(trial_dir / "exits.jsonl")
    assert [e["restart"] for e in exits] == [0, 1, 2] and {e["job"] for e in exits} == {ref}
    assert [e["code"] for e in exits] == [80, 80, 0], exits
    assert exits[0]["signal"] == "USR2"   # scancel --batch: to the batch shell
    assert exits[1]["signal"] == "TERM"   # scontrol requeue: SIGTERM, then KillWait
    runs = read_jsonl(trial_dir / "runs.jsonl")
    assert [r["preempted"] for r in runs] == [True, True, False]
    for before, after in zip(runs, runs[1:], strict=False):
        assert after["first_batch"] == before["batches_done"], runs  # nothing lost
    assert_bit_identical(trial_dir / "final_weights.pt", tmp_path / "reference.pt", reference)


def slurm_runs(job_id: str) -> list[tuple[str, str]]:
    """``(state, node)`` of every run of ``job_id`` in accounting (``sacct -D``: a
    requeued job's earlier runs too), oldest first."""
    out = subprocess.run(["sacct", "-n", "-P", "-X", "-D", "-j", job_id, "-o", "State,NodeList"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return [(state.split()[0], nodes) for state, _, nodes in
            (line.partition("|") for line in out.splitlines() if line.strip())]


def test_node_crash_restarts_from_last_checkpoint_and_counts(
        harness: DaemonHarness, slurm_cluster: Any, tmp_path: Path) -> None:
    """Every process of the trial's node is SIGKILLed and the node marked DOWN (what
    Slurm does after SlurmdTimeout, or a health check at once): Slurm ends the run
    NODE_FAIL and requeues the job, the daemon counts a restart, and the trial resumes
    from its last periodic checkpoint wherever Slurm starts it again. The requeue is
    awaited while the node is still down, so nothing depends on when a revived slurmd
    registers."""
    reference = start_reference(tmp_path / "reference.pt", BATCHES, HPARAMS)
    # --exclusive: the crash kills every job on the node; let that be only this one
    # the first run holds after batch 35, between two periodic checkpoints (every 10
    # batches), so the crash loses some steps whatever the trial's pace (polling for a
    # window of steps raced it: CI, stop 46)
    exp = harness.submit(experiment_yaml(batches=BATCHES, pool="debug",
                                         hparams={**HPARAMS, "hold_at": HOLD_AT},
                                         max_restarts=2, sbatch_args=["--exclusive"]))
    ref = harness.wait("the trial's job", lambda: harness.job_ref(exp))
    trial_dir, ckpt_dir = harness.trial_dir(exp), harness.ckpt_dir(exp)
    harness.wait("the first run to hold after a few periodic checkpoints",
                 lambda: max_step(trial_dir) == HOLD_AT and len(checkpoints(ckpt_dir)) >= 3,
                 timeout=480, story_of=exp)
    node = slurm_cluster.squeue_field(ref, "%N")
    job_id = slurm_cluster.squeue_field(ref, "%A")
    assert node and job_id, f"job {ref} is not running"
    t0 = time.monotonic()
    try:
        crash = crash_node(node)
        crashed_at = max_step(trial_dir)
        last_ckpt = checkpoints(ckpt_dir)[-1]["steps_completed"]
        assert last_ckpt < crashed_at  # the steps since are lost, as on a real crash
        assert any(name.startswith("python") for name in crash.killed.values()), \
            crash.killed
        # (1) the requeue, seen by the daemon while the node is still down
        harness.wait("the daemon to count the node failure as a restart",
                     lambda: harness.trial(exp).restarts >= 1, timeout=300)
        requeue_s = time.monotonic() - t0
        assert slurmd_pid(node) is None, "the requeue came without the node's slurmd"
    finally:
        revive_node(node)
    revived_s = time.monotonic() - t0
    # (2) the requeued run resumes and completes
    done = harness.wait_done(exp, timeout=600)
    print(f"crash -> restart counted {requeue_s:.1f} s; node back {revived_s:.1f} s; "
          f"experiment done {time.monotonic() - t0:.1f} s")

    assert done.state == "COMPLETED", harness.events(exp)

    def all_runs() -> list[tuple[str, str]] | None:
        seen = slurm_runs(job_id)
        return seen if len(seen) >= 2 and seen[-1][0] not in ("PENDING", "RUNNING") else None

    accounted = wait_until("accounting to record every run", all_runs, timeout=60)
    trial = harness.trial(exp)
    exits = read_jsonl(trial_dir / "exits.jsonl")
    runs = read_jsonl(trial_dir / "runs.jsonl")
    seen = (f"accounting {accounted}; events {harness.events(exp)}; exits {exits}; "
            f"runs {runs}")
    assert accounted[0] == ("NODE_FAIL", node) and accounted[-1][0] == "COMPLETED", seen
    # each run Slurm ended without the trial's exit record counts once: the crash's, and
    # any other a loaded machine adds (CI once counted 2; accounting then says why)
    requeues = len(accounted) - 1
    assert trial.restarts == requeues, seen
    assert any(kind == "restart" for kind, _ in harness.events(exp)), seen
    # the crashed run (restart 0) left no exit record; the last one completed
    assert [(e["reason"], e["restart"], e["job"]) for e in exits] == [
        ("completed", requeues, ref)], seen
    # a run records itself as it exits (the crashed one could not): the run after the
    # crash resumed from the last periodic checkpoint before it (after a second failure,
    # from that one or a later checkpoint)
    first = runs[0]["first_batch"]
    assert first == last_ckpt if requeues == 1 else first >= last_ckpt, (last_ckpt, seen)
    assert "resumed from checkpoint" in job_log(trial_dir)
    assert_bit_identical(trial_dir / "final_weights.pt", tmp_path / "reference.pt", reference)


def test_signal_before_training_code_handles_it_is_free(
        harness: DaemonHarness, slurm_cluster: Any, tmp_path: Path) -> None:
    """A preemption signal in the first second of a run (python still importing torch,
    no handler yet: USR2's default action kills it) loses nothing and is not counted."""
    batches = 60
    reference = start_reference(tmp_path / "reference.pt", batches, HPARAMS)
    exp = harness.submit(experiment_yaml(batches=batches, pool="debug", hparams=HPARAMS))
    ref = harness.wait("the trial's job", lambda: harness.job_ref(exp))
    trial_dir = harness.trial_dir(exp)
    harness.wait("the job to start", lambda: "run 0 on" in job_log(trial_dir), timeout=480,
                 interval=0.1)
    subprocess.run(["scancel", "--signal=USR2", "--batch", ref], check=True, timeout=30)
    done = harness.wait_done(exp, timeout=400)

    assert done.state == "COMPLETED", harness.events(exp)
    exits = read_jsonl(trial_dir / "exits.jsonl")
    assert exits[0]["restart"] == 0 and exits[0]["signal"] == "USR2", exits
    assert exits[0]["code"] > 128, f"the signal came after the handler: {exits}"
    assert exits[0]["reason"] == "preempted" and exits[-1]["reason"] == "completed", exits
    assert {run for run, _ in steps_log(trial_dir)} == {1}  # run 0 died before training
    assert harness.trial(exp).restarts == 0, (exits, harness.events(exp))
    assert_bit_identical(trial_dir / "final_weights.pt", tmp_path / "reference.pt", reference)


def test_array_task_requeues_itself_alone(harness: DaemonHarness) -> None:
    """Two trials in one array; the task whose job id is the array's own id (Slurm gives
    it to one task: ``scontrol requeue <that id>`` names *every* task of the array) gets
    the early signal and requeues itself: only that task runs twice, its sibling runs
    once, untouched. Before the fix the template called ``scontrol requeue
    $SLURM_JOB_ID`` and the sibling was requeued too ("DUE TO JOB REQUEUE")."""
    raw = experiment_yaml(batches=BATCHES, pool="debug", hparams=HPARAMS)
    raw["name"] = "array-requeue"
    raw["searcher"] = {"name": "random", "metric": "validation_loss", "max_trials": 2,
                       "max_concurrent_trials": 2, "max_length": {"batches": BATCHES}}
    exp = harness.submit(raw)
    run_dir = harness.experiment(exp).run_dir

    def tasks() -> dict[str, str] | None:
        """``{array ref: job id}`` of both tasks, once both run."""
        ref = harness.job_ref(exp)
        if ref is None:
            return None
        out = subprocess.run(["squeue", "-h", "-r", "-j", ref.split("_")[0], "-o", "%i %A %T"],
                             capture_output=True, text=True, timeout=30).stdout.split("\n")
        rows = [line.split() for line in out if line.strip()]
        if len(rows) == 2 and all(r[2] == "RUNNING" for r in rows):
            return {r[0]: r[1] for r in rows}
        return None

    running = harness.wait("both array tasks to run", tasks, timeout=300)
    array_id = next(iter(running)).split("_")[0]
    master = next(ref for ref, job_id in running.items() if job_id == array_id)
    sibling = next(ref for ref in running if ref != master)
    trial_dirs = sorted(Path(run_dir, "trials").iterdir())
    harness.wait("both trials to train", lambda: all(
        len(steps_log(d)) >= 10 for d in trial_dirs), timeout=300)
    subprocess.run(["scancel", "--signal=USR2", "--batch", master], check=True, timeout=30)
    done = harness.wait_done(exp, timeout=600)
    assert done.state == "COMPLETED", harness.events(exp)
    exits = {d.name: read_jsonl(d / "exits.jsonl") for d in trial_dirs}
    by_job = {e["job"]: [x["reason"] for x in es] for es in exits.values() for e in es[:1]}
    assert by_job[master] == ["preempted", "completed"], exits
    assert by_job[sibling] == ["completed"], exits          # one run, never requeued
    assert len(slurm_runs(sibling)) == 1 and len(slurm_runs(master)) == 2, (
        slurm_runs(sibling), slurm_runs(master))
