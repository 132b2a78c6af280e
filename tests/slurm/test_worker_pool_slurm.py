"""The worker pool on the dev cluster (dethpc.launch.worker, first cut): one array of 2
worker tasks rendered by ``worker_array_script`` runs 3 trials and a promotion
without a new job (the promoted trial resumes from its checkpoint in a live worker);
a worker preempted mid-trial (``scancel --signal=USR2 --batch``, what Slurm's
``--signal=B:`` sends) hands its lease back and requeues itself, the trial resumes on
the other worker; after ``drain`` every task ends COMPLETED; a worker whose batch shell
is SIGKILLed does not outlive it (it hands its trial back); each worker keeps
``pool/alive/<its task>`` under the daemon's name for it while it runs. The test plays the
daemon side (enqueue, results). Wall time about 15 s here (up to 35 s with queue waits).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from dethpc.common import worker_queue as queue
from dethpc.common.jobref import JobRef
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.jobs.worker_pool_script import worker_array_script
from tests.local.test_worker_pool_local import CFG, Pool

CLUSTER = ClusterConfig(pools={"default": ResourcePool(
    name="default", partition="debug", default_time="00:10:00", signal="USR2",
    signal_grace_s=30)})


def _outputs(pool: Pool) -> str:
    return " | ".join(f"{p.name}: {p.read_text()[-600:]}"
                      for p in sorted(pool.paths.root.glob("slurm-*.out")))


def _tasks(slurm_cluster: Any, job: str) -> dict[str, str]:
    return {r["JobID"]: r["State"] for r in slurm_cluster.sacct(job, "JobID,State")}


def _start(tmp_path: Path, slurm_cluster: Any, tasks: int) -> tuple[Pool, str]:
    """A pool of ``tasks`` worker tasks (``worker_array_script``) on the dev cluster."""
    pool = Pool(tmp_path / "run", backend="slurm")
    script = tmp_path / "pool.sbatch"
    script.write_text(worker_array_script(CFG, CLUSTER, backend="slurm", run_dir=pool.run_dir,
                                          exp_id=1, python=sys.executable,
                                          preload=["dethpc.core"], heartbeat_s=1.0))
    return pool, slurm_cluster.sbatch(f"--array=0-{tasks - 1}", f"--chdir={tmp_path}",
                                      str(script))


def test_pool_array_runs_promotions_and_survives_a_preemption(tmp_path: Path,
                                                               slurm_cluster: Any) -> None:
    pool, job = _start(tmp_path, slurm_cluster, 2)
    try:
        for t in range(3):
            pool.submit(t, 1, length=5, x=float(t))
        first = pool.wait_results(3, timeout_s=180)
        assert {r.reason for r in first} == {"completed"}
        # each worker that ran keeps pool/alive/<task> under the name the daemon polls
        # (``WorkerPoolTender.worker_refs``): what its quiet poll cadence compares
        tasks = {str(JobRef(job, task=i)) for i in range(2)}
        alive = {p.name for p in pool.paths.alive.iterdir()}
        assert {r.extra["job"] for r in first} <= alive <= tasks, (alive, tasks)
        pool.submit(1, 2, length=15, x=1.0)                   # a promotion: no new job
        promoted = pool.wait_results(4, timeout_s=120)[3]
        assert (promoted.trial_id, promoted.seq, promoted.reason) == (1, 2, "completed")
        assert "toy: resumed at step 5" in pool.log(1) and pool.steps(1) == 15
        assert {r.extra["job"] for r in pool.results} <= {f"{job}_0", f"{job}_1"}

        pool.submit(5, 1, length=120, every=10, step_time=0.1)
        pool.wait_until(lambda: pool.steps(5) >= 15, "trial 5 trains", timeout_s=120)
        holder = pool.holder(5)
        ref = holder.removeprefix("j").split(".")[0]          # j<array>_<task>.<pid>
        assert ref in (f"{job}_0", f"{job}_1")
        slurm_cluster.run(["scancel", "--signal=USR2", "--batch", ref])
        done = pool.wait_results(5, timeout_s=180)[4]
        why = f"{done} exits={pool.exits(5)} {pool.diag()} {_outputs(pool)}"
        assert (done.trial_id, done.reason) == (5, "completed"), why
        # one hand-back only: the other worker was not requeued with it
        assert done.extra["attempt"] == 1, why
        assert pool.exits(5) == ["preempted", "completed"], why
        assert "toy: resumed at step" in pool.log(5) and pool.steps(5) == 120, why
        restarts = slurm_cluster.show_job(ref).get("Restarts")
        assert restarts == "1", f"Restarts={restarts}: {why}"    # requeued, not ended

        pool.paths.drain.touch()
        slurm_cluster.wait_for("both worker tasks end", lambda: all(
            s == "COMPLETED" for s in _tasks(slurm_cluster, job).values())
            and len(_tasks(slurm_cluster, job)) == 2, timeout=180)
        assert len(pool.results) == 5, (pool.results, pool.diag())
        assert not any(pool.paths.alive.iterdir())            # each exit removed its file
    finally:
        slurm_cluster.cancel(job)
    exits = [json.loads(x) for x in (pool.exp.trial(5).exit_log).read_text().splitlines()]
    assert exits[0]["job"] == ref


def test_a_scancelled_worker_ends_and_is_not_requeued(tmp_path: Path,
                                                      slurm_cluster: Any) -> None:
    """``scancel`` of a worker task (a user's or an admin's) ends it: its TERM makes the
    worker hand its item back and exit as on a preemption, but the job is CANCELLED, so
    the script does not requeue it (it once did: the task came back after every scancel,
    Restarts 4 after four)."""
    pool, job = _start(tmp_path, slurm_cluster, 1)
    ref = f"{job}_0"
    try:
        pool.submit(1, 1, length=600, every=10, step_time=0.1)
        pool.wait_until(lambda: pool.steps(1) >= 5, "the trial trains", timeout_s=120)
        slurm_cluster.run(["scancel", ref])
        slurm_cluster.wait_for("the worker task ends", lambda: _tasks(slurm_cluster, job).get(
            ref) not in (None, "RUNNING", "PENDING", "REQUEUED"), timeout=120)
        # past COMPLETING (a requeue passes through it too, then PENDING)
        shown = slurm_cluster.wait_for("the task's state settles", lambda: (
            lambda j: j if j.get("JobState") not in (None, "RUNNING", "COMPLETING") else None)(
                slurm_cluster.show_job(ref)), timeout=60)
        why = f"{shown} {pool.diag()} {_outputs(pool)}"
        assert shown.get("JobState") == "CANCELLED", why
        assert shown.get("Restarts") == "0", why
        assert "not requeued" in _outputs(pool), why
    finally:
        slurm_cluster.cancel(job)


def test_a_worker_at_its_time_limit_requeues_itself_and_its_trial_resumes(
        tmp_path: Path, slurm_cluster: Any) -> None:
    """Issue 36 item 1, the pool worker's time limit: a 1-minute worker task gets the
    pool's early signal before its limit, hands its trial back, and requeues itself
    (``dethpc.launch.run_end``: the job is still RUNNING); the trial resumes from its
    checkpoint in the requeued worker and completes across allocations."""
    cluster = ClusterConfig(pools={"default": ResourcePool(
        name="default", partition="debug", default_time="00:01:00", signal="USR2",
        signal_grace_s=20)})
    pool = Pool(tmp_path / "run", backend="slurm")
    script = tmp_path / "pool.sbatch"
    script.write_text(worker_array_script(CFG, cluster, backend="slurm", run_dir=pool.run_dir,
                                          exp_id=1, python=sys.executable,
                                          preload=["dethpc.core"], heartbeat_s=1.0))
    job = slurm_cluster.sbatch("--array=0", f"--chdir={tmp_path}", str(script))
    ref = f"{job}_0"
    try:
        # ~50 s of training: more than one 1-minute allocation gives once the signal
        # comes (Slurm checks limits every ~30 s: 10 to 40 s after the start)
        pool.submit(1, 1, length=500, every=10, step_time=0.1)
        done = pool.wait_results(1, timeout_s=600)[0]
        why = f"{done} exits={pool.exits(1)} {pool.diag()} {_outputs(pool)}"
        assert (done.trial_id, done.reason) == (1, "completed"), why
        exits = pool.exits(1)
        assert len(exits) >= 2 and exits[-1] == "completed", why
        assert set(exits[:-1]) <= {"preempted", "time_limit"}, why
        assert "toy: resumed at step" in pool.log(1) and pool.steps(1) == 500, why
        restarts = int(slurm_cluster.show_job(ref).get("Restarts") or 0)
        assert restarts >= 1, why    # the same task, requeued: not a new job
    finally:
        slurm_cluster.cancel(job)


def test_a_worker_whose_batch_shell_is_killed_does_not_outlive_it(
        tmp_path: Path, slurm_cluster: Any) -> None:
    """The batch shell SIGKILLed (``scancel --signal=KILL --batch``): the job ends, and
    proctrack/linuxproc (this cluster) does not reach the worker, reparented to PID 1.
    Before dethpc.common.parent_death it went on holding its lease and training (and
    then claiming more) with no job; now its parent's death is its SIGTERM: the trial
    is preempted, recorded, and its item handed back within seconds."""
    pool, job = _start(tmp_path, slurm_cluster, 1)
    ref = f"{job}_0"
    try:
        pool.submit(1, 1, length=6000, every=10, step_time=0.1)
        pool.wait_until(lambda: pool.steps(1) >= 5, "the trial trains", timeout_s=120)
        slurm_cluster.run(["scancel", "--signal=KILL", "--batch", ref])
        pool.wait_until(lambda: queue.active_leases(pool.paths) == []
                        and queue.pending(pool.paths) != [], "the lease is handed back",
                        timeout_s=60)
        why = f"{pool.diag()} {_outputs(pool)}"
        assert queue.pending(pool.paths) == ["t1-s1.json"], why
        assert pool.exits(1) == ["preempted"], why
        assert "its parent (pid" in _outputs(pool), why
    finally:
        slurm_cluster.cancel(job)
