"""A cancel that fails is not lost. When the daemon stops a trial whose job is still
pending it closes the job and cancels it; if that ``scancel`` fails (slurmctld away), the
job is still in Slurm's queue with nothing watching it, and would later run a stopped
trial. ``Job.cancel_due`` keeps it until a cancel goes through: the next tick cancels it
again, even after its experiment has ended. Real SQLite; a backend that records every
call, whose jobs stay pending and whose cancel fails while told to."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from sqlmodel import select

from dethpc.backends.local import LocalBackend
from dethpc.common.errors import CommandError
from dethpc.config import load_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control.daemon import Daemon
from dethpc.control.experiments import create_experiment, request_state
from dethpc.store import Store
from dethpc.store.models import Experiment, ExperimentState, Job
from tests.unit.control.test_fast_stop import TOY, RunningForever


class FailingCancel(RunningForever):
    """Jobs stay PENDING; ``cancel`` raises while ``fail`` is set (what the Slurm backend
    raises when scancel cannot reach slurmctld)."""

    def __init__(self, spool: Path) -> None:
        super().__init__(spool)
        self.running = False
        self.fail = False
        self.cancel_calls: list[list[str]] = []

    def cancel(self, refs: Sequence[str], signal: str | None = None) -> None:
        self.cancel_calls.append(list(refs))
        if self.fail:
            raise CommandError(["scancel", *refs], 1, "",
                               "scancel: error: Unable to contact slurm controller")
        super().cancel(refs, signal)


def start(tmp_path: Path) -> tuple[Store, Daemon, FailingCancel, int]:
    cfg_path = tmp_path / "exp.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "name": "t", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6}},
        "searcher": {"name": "random", "metric": "validation_loss", "max_length": 8,
                     "max_trials": 2, "max_concurrent_trials": 2}}))
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    cluster = ClusterConfig(runs_root=tmp_path / "runs",
                            pools={"default": ResourcePool(name="default")})
    backend = FailingCancel(tmp_path / "spool")
    exp_id = create_experiment(store, cluster, load_experiment_config(cfg_path), TOY,
                               LocalBackend(tmp_path / "spool"))
    daemon = Daemon(store, cluster, backend)
    daemon.tick()   # creates the trials and submits their jobs
    daemon.tick()   # polls them: pending
    return store, daemon, backend, exp_id


def jobs(store: Store, exp_id: int) -> list[Job]:
    with store.session() as s:
        return list(s.exec(select(Job).where(Job.experiment_id == exp_id)))


def test_a_failed_cancel_of_a_closed_pending_job_is_retried_until_it_goes_through(
        tmp_path: Path) -> None:
    store, daemon, backend, exp_id = start(tmp_path)
    refs = sorted(j.ref or "" for j in jobs(store, exp_id))
    assert len(refs) == 2 and all(j.live for j in jobs(store, exp_id))
    request_state(store, exp_id, "cancel")
    backend.fail = True
    with pytest.raises(CommandError):
        daemon.tick()   # closes both pending jobs, ends the experiment; scancel fails
    assert backend.cancel_calls == [refs]
    assert backend.cancelled == set()
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None and exp.state == ExperimentState.CANCELED
    assert [(j.live, j.cancel_due) for j in jobs(store, exp_id)] == [(False, True)] * 2

    stats = daemon.tick()   # slurmctld still away: the retry fails too, the tick goes on
    assert backend.cancel_calls[-1] == refs and stats.errors
    assert all(j.cancel_due for j in jobs(store, exp_id))

    backend.fail = False
    stats = daemon.tick()   # the experiment has ended: only the due cancel brings it
    assert backend.cancel_calls[-1] == refs
    assert backend.cancelled == set(refs) and stats.cancelled == 2 and not stats.errors
    assert [j.cancel_due for j in jobs(store, exp_id)] == [False, False]

    calls = len(backend.cancel_calls)
    daemon.tick()
    assert len(backend.cancel_calls) == calls, "a cancel that went through is not repeated"


def test_a_cancel_that_goes_through_at_once_leaves_nothing_due(tmp_path: Path) -> None:
    store, daemon, backend, exp_id = start(tmp_path)
    request_state(store, exp_id, "cancel")
    daemon.tick()
    assert len(backend.cancel_calls) == 1 and len(backend.cancelled) == 2
    assert [(j.live, j.cancel_due) for j in jobs(store, exp_id)] == [(False, False)] * 2
    daemon.tick()
    assert len(backend.cancel_calls) == 1
