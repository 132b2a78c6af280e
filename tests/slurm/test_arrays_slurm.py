"""Array submission limits on the real dev cluster.

* A batch larger than the cluster's ``MaxArraySize`` is split into several
  arrays, each throttled to ``%min(K, its size)``, and every trial runs once.
  The dev cluster's ``MaxArraySize`` is 10001, and lowering it means restarting
  slurmctld under every other test, so the backend reports 3 here, as a site
  with ``MaxArraySize=3`` would; the arrays themselves are real.
* When the experiment is cancelled, the array tasks still pending (12 trials
  at 8 CPUs each on the 64-CPU partition: 4 wait for resources) are cancelled
  with the running ones: nothing of the experiment is left in squeue.
"""

from __future__ import annotations

import time

import pytest
from sqlmodel import select

from dethpc import experiments
from dethpc.cli.views import describe_experiment
from dethpc.config import load_experiment_config
from dethpc.daemon import Daemon
from dethpc.runner import CommandRunner
from dethpc.store.models import Batch

from .test_daemon_slurm import TOY, drive, env, in_queue, toy_config  # noqa: F401 - env: fixture


def grid(n: int, step_time: float) -> dict[str, object]:
    return {"x": {"type": "categorical", "vals": list(range(n))}, "step_time": step_time}


def array_tasks(job: str) -> list[str]:
    """The task ids sacct recorded for array ``job`` (``123_0`` ... )."""
    out = CommandRunner().run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "JobID"]).stdout
    return sorted(line for line in out.split() if line.startswith(f"{job}_"))


def test_batch_larger_than_max_array_size_is_split(env, tmp_path,  # noqa: F811
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, store, runner, backend = env
    monkeypatch.setattr(backend, "max_array_size", lambda: 3)
    cfg = load_experiment_config(toy_config(
        tmp_path / "c.yaml", hyperparameters=grid(7, 0.05),
        searcher={"name": "grid", "metric": "validation_loss", "max_concurrent_trials": 5,
                  "max_length": {"batches": 10}}))
    exp = experiments.create_experiment(store, cluster, cfg, TOY, backend)
    daemon = Daemon(store, cluster, backend)
    assert drive(daemon, store, exp, timeout=300) == "COMPLETED"
    with store.session() as s:
        batches = list(s.exec(select(Batch).where(Batch.experiment_id == exp)
                              .order_by(Batch.id)))  # type: ignore[arg-type]
    # the first tick creates K=5 trials: arrays of 3 and 2; the last 2 follow as trials end
    assert [(b.size, b.throttle) for b in batches[:2]] == [(3, 3), (2, 2)], batches
    assert sum(b.size for b in batches) == 7 and max(b.size for b in batches) <= 3, batches
    assert runner.count("sbatch") == len(batches)
    for b in batches:
        assert b.array_job_id
        deadline = time.monotonic() + 30   # accounting lags the controller a little
        while len(array_tasks(b.array_job_id)) < b.size and time.monotonic() < deadline:
            time.sleep(0.5)
        assert array_tasks(b.array_job_id) == [f"{b.array_job_id}_{i}" for i in range(b.size)]
    trials = describe_experiment(store, exp)["trials"]
    assert len(trials) == 7 and all(t["state"] == "COMPLETED" for t in trials), trials


def test_cancel_takes_pending_array_tasks_too(env, tmp_path) -> None:  # noqa: F811
    cluster, store, _runner, backend = env
    cfg = load_experiment_config(toy_config(
        tmp_path / "c.yaml", hyperparameters=grid(12, 1.0),
        searcher={"name": "grid", "metric": "validation_loss", "max_concurrent_trials": 0,
                  "max_length": {"batches": 500}}))
    exp = experiments.create_experiment(store, cluster, cfg, TOY, backend)
    daemon = Daemon(store, cluster, backend)
    drive(daemon, store, exp, until=lambda d: sum(t["state"] == "RUNNING"
                                                   for t in d["trials"]) >= 2)
    queued = in_queue(store, exp)
    assert len(queued) == 12, queued       # one array: 8 running, 4 waiting for CPUs
    experiments.request_state(store, exp, "cancel")
    assert drive(daemon, store, exp, timeout=180) == "CANCELED"
    deadline = time.monotonic() + 60
    while in_queue(store, exp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert in_queue(store, exp) == []
    trials = describe_experiment(store, exp)["trials"]
    assert all(t["state"] == "CANCELED" for t in trials), trials
