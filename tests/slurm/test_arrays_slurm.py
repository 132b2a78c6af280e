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
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from dethpc.common.runner import CommandRunner
from dethpc.config import load_experiment_config
from dethpc.control import experiments
from dethpc.control.daemon import Daemon
from dethpc.store.models import Batch
from dethpc.surfaces.views import describe_experiment
from tests.backend_polling import submits

from .test_daemon_slurm import (  # noqa: F401 - env: fixture
    TOY,
    drive,
    end_and_check_queue_empty,
    env,
    in_queue,
    toy_config,
)  # noqa: F401 - env: fixture

#: the version-spanning tier: also runs on the Slurm 25.11 dev cluster (docs/testing.md)
pytestmark = pytest.mark.spanning


def grid_experiment(setup: Any, tmp_path: Path, *, trials: int, step_time: float, k: int,
                    batches: int) -> tuple[int, Daemon]:
    """A grid of ``trials`` toy trials with max_concurrent_trials ``k``, and its daemon."""
    cluster, store, _runner, backend = setup
    cfg = load_experiment_config(toy_config(
        tmp_path / "c.yaml",
        hyperparameters={"x": {"type": "categorical", "vals": list(range(trials))},
                         "step_time": step_time},
        searcher={"name": "grid", "metric": "validation_loss", "max_concurrent_trials": k,
                  "max_length": {"batches": batches}}))
    exp = experiments.create_experiment(store, cluster, cfg, TOY, backend)
    return exp, Daemon(store, cluster, backend)


def array_tasks(job: str) -> list[str]:
    """The task ids sacct recorded for array ``job`` (``123_0`` ... )."""
    out = CommandRunner().run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "JobID"]).stdout
    return sorted(line for line in out.split() if line.startswith(f"{job}_"))


def test_batch_larger_than_max_array_size_is_split(env, tmp_path,  # noqa: F811
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _cluster, store, runner, backend = env
    monkeypatch.setattr(backend, "max_array_size", lambda: 3)
    exp, daemon = grid_experiment(env, tmp_path, trials=7, step_time=0.05, k=5, batches=10)
    assert drive(daemon, store, exp, timeout=300) == "COMPLETED"
    with store.session() as s:
        batches = list(s.exec(select(Batch).where(Batch.experiment_id == exp)
                              .order_by(Batch.id)))  # type: ignore[arg-type]
    # the first tick creates K=5 trials: arrays of 3 and 2; the last 2 follow as trials end
    assert [(b.size, b.throttle) for b in batches[:2]] == [(3, 3), (2, 2)], batches
    assert sum(b.size for b in batches) == 7 and max(b.size for b in batches) <= 3, batches
    assert submits(runner) == len(batches)
    for b in batches:
        assert b.array_job_id
        want = [f"{b.array_job_id}_{i}" for i in range(b.size)]
        # accounting lags the controller: for a while sacct may still hold the array's
        # pending record (``123_[0-1%2]``) beside the tasks that started
        deadline = time.monotonic() + 60
        while array_tasks(b.array_job_id) != want and time.monotonic() < deadline:
            time.sleep(0.5)
        assert array_tasks(b.array_job_id) == want
    trials = describe_experiment(store, exp)["trials"]
    assert len(trials) == 7 and all(t["state"] == "COMPLETED" for t in trials), trials


def test_cancel_takes_pending_array_tasks_too(env, tmp_path) -> None:  # noqa: F811
    store = env[1]
    exp, daemon = grid_experiment(env, tmp_path, trials=12, step_time=1.0, k=0, batches=500)
    drive(daemon, store, exp, until=lambda d: sum(t["state"] == "RUNNING"
                                                   for t in d["trials"]) >= 2)
    queued = in_queue(store, exp)
    assert len(queued) == 12, queued       # one array: 8 running, 4 waiting for CPUs
    end_and_check_queue_empty(daemon, store, exp, "cancel")
