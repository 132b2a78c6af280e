"""``dethpc experiment set-concurrency`` on the real dev cluster: a running array's
ArrayTaskThrottle follows max_concurrent_trials (scontrol update), and a grown limit
lets the searcher start more trials at once."""

from __future__ import annotations

from sqlmodel import select

from dethpc.common.runner import CommandRunner
from dethpc.config import load_experiment_config
from dethpc.control import experiments
from dethpc.control.daemon import Daemon
from dethpc.store.models import Batch, Event

from .test_daemon_slurm import TOY, drive, env, toy_config  # noqa: F401 - env is a fixture


def throttle_of(job: str) -> str:
    out = CommandRunner().run(["scontrol", "-o", "show", "job", job]).stdout
    return next(w.split("=", 1)[1] for w in out.split() if w.startswith("ArrayTaskThrottle="))


def updates(runner) -> int:
    return sum(1 for c in runner.calls if list(c[:2]) == ["scontrol", "update"])


def test_set_concurrency_updates_live_throttle(env, tmp_path):  # noqa: F811
    cluster, store, runner, backend = env
    cfg = load_experiment_config(toy_config(
        tmp_path / "c.yaml", searcher={"name": "random", "metric": "validation_loss",
                                       "max_trials": 5, "max_concurrent_trials": 3,
                                       "max_length": {"batches": 40}},
        hyperparameters={"x": 3, "step_time": 0.25}))
    exp = experiments.create_experiment(store, cluster, cfg, TOY, backend)
    daemon = Daemon(store, cluster, backend)
    assert not daemon.tick().errors
    with store.session() as s:
        (batch,) = s.exec(select(Batch).where(Batch.experiment_id == exp)).all()
    job = batch.array_job_id
    assert job and batch.size == 3 and throttle_of(job) == "3"

    assert experiments.set_concurrency(store, exp, 1) == 3
    daemon.tick()
    assert throttle_of(job) == "1"
    assert updates(runner) == 1
    daemon.tick()                                  # steady: no second update
    assert updates(runner) == 1

    experiments.set_concurrency(store, exp, 5)
    daemon.tick()
    assert throttle_of(job) == "3"                 # min(limit, the array's 3 tasks)
    with store.session() as s:
        batches = s.exec(select(Batch).where(Batch.experiment_id == exp)).all()
        events = [e.message for e in s.exec(select(Event).where(
            Event.experiment_id == exp, Event.kind == "throttle"))]
    # the two trials left of max_trials=5 start at once, in a second array
    assert [b.size for b in batches] == [3, 2], batches
    assert events == [f"job {job}: ArrayTaskThrottle 3 -> 1",
                      f"job {job}: ArrayTaskThrottle 1 -> 3"]
    assert drive(daemon, store, exp, timeout=240) == "COMPLETED"
