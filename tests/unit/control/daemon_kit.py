"""What the tests of the daemon's phases share: a backend that records every call and
answers as told, and a store with one experiment whose trials are added directly (no
searcher, no tick), so that each phase is driven on its own. Real SQLite."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sqlmodel import select

from dethpc.backends.base import JobAction, JobInfo, JobRequest, JobState, PoolLimits
from dethpc.backends.local import LocalBackend
from dethpc.common.traits import SLURM
from dethpc.config import load_experiment_config
from dethpc.config.model import ClusterConfig, ExperimentConfig, ResourcePool
from dethpc.control.daemon.shared import Guard
from dethpc.control.experiments import create_experiment
from dethpc.control.reconcile import load_config
from dethpc.store import Store
from dethpc.store.models import Batch, BatchState, Event, Experiment, Job, Trial

TOY = Path(__file__).resolve().parents[2] / "fixtures" / "toy"


class Recorder(LocalBackend):
    """Runs nothing: records each call in ``calls`` (name, args) and answers from its
    fields. Submitted jobs are PENDING until ``states`` says otherwise."""

    def __init__(self, spool: Path, *, slurm_traits: bool = False) -> None:
        super().__init__(spool)
        if slurm_traits:
            self.traits = dataclasses.replace(SLURM)
        self.calls: list[tuple[str, Any]] = []
        self.requests: list[JobRequest] = []
        self.states: dict[str, JobState] = {}
        self.found: list[JobInfo] = []
        self.user: list[JobInfo] | None = None
        self.limits = PoolLimits()
        self.array_max = 1000
        self.submit_errors: list[Exception] = []
        self.cancel_error: Exception | None = None
        self.next_id = 100

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def submit(self, request: JobRequest) -> list[str]:
        self.calls.append(("submit", request.name))
        self.requests.append(request)
        if self.submit_errors:
            raise self.submit_errors.pop(0)
        self.next_id += 1
        refs = ([f"{self.next_id}_{i}" for i in request.array_indices]
                if request.array_indices else [str(self.next_id)])
        for r in refs:
            self.states.setdefault(r, JobState.PENDING)
        return refs

    def poll(self, refs: Sequence[str]) -> dict[str, JobInfo]:
        self.calls.append(("poll", list(refs)))
        return {r: JobInfo(ref=r, state=self.states.get(r, JobState.UNKNOWN)) for r in refs}

    def find(self, names: Sequence[str]) -> list[JobInfo]:
        self.calls.append(("find", list(names)))
        return [i for i in self.found if i.name in names]

    def cancel(self, refs: Sequence[str], signal: str | None = None) -> None:
        self.calls.append(("cancel", list(refs)))
        if self.cancel_error is not None:
            raise self.cancel_error

    def act(self, refs: Sequence[str], action: JobAction) -> None:
        self.calls.append((action.value, list(refs)))

    def set_throttle(self, array_job_id: str, limit: int) -> None:
        self.calls.append(("set_throttle", (array_job_id, limit)))

    def max_array_size(self) -> int:
        self.calls.append(("max_array_size", None))
        return self.array_max

    def job_limits(self, partition: str | None, qos: str | None, account: str | None,
                   sbatch_args: Sequence[str] = ()) -> PoolLimits:
        self.calls.append(("job_limits", partition))
        return self.limits

    def user_jobs(self) -> list[JobInfo] | None:
        self.calls.append(("user_jobs", None))
        return self.user


class CountingGuard(Guard):
    """A guard that counts its checks (the lease is always held)."""

    def __init__(self) -> None:
        super().__init__(None)
        self.checks = 0

    def holds(self) -> None:
        self.checks += 1


@dataclass
class World:
    store: Store
    cluster: ClusterConfig
    backend: Recorder
    exp_id: int

    def experiment(self) -> Experiment:
        with self.store.session() as s:
            exp = s.get(Experiment, self.exp_id)
            assert exp is not None
            return exp

    def config(self) -> ExperimentConfig:
        return load_config(self.experiment())

    def add_trials(self, n: int, **fields: Any) -> list[Trial]:
        """``n`` QUEUED trials that need a job, as a searcher's creates leave them."""
        with self.store.session() as s:
            rows = [Trial(experiment_id=self.exp_id, request_id=i, hparams={"x": i},
                          **fields) for i in range(n)]
            for t in rows:
                s.add(t)
        return rows

    def add_batch(self, trials: list[Trial], *, name: str = "b",
                  batch_state: BatchState | None = None, **job: Any) -> int:
        """A batch of ``trials`` with one job row each (array index ``i``; ``job``'s
        fields on every row, a ``ref`` given as a format string gets ``{i}``)."""
        with self.store.session() as s:
            batch = Batch(experiment_id=self.exp_id, name=name, size=len(trials))
            if batch_state is not None:
                batch.state = batch_state
            s.add(batch)
            s.flush()
            assert batch.id is not None
            for i, t in enumerate(trials):
                assert t.id is not None
                fields = {k: (v.format(i=i) if k == "ref" else v) for k, v in job.items()}
                s.add(Job(experiment_id=self.exp_id, trial_id=t.id, batch_id=batch.id,
                          array_index=i, **fields))
            return batch.id

    def trials(self) -> list[Trial]:
        with self.store.session() as s:
            return list(s.exec(select(Trial).where(Trial.experiment_id == self.exp_id)
                               .order_by(Trial.id)))  # type: ignore[arg-type]

    def events(self, kind: str | None = None) -> list[str]:
        with self.store.session() as s:
            return [e.message for e in s.exec(select(Event).where(
                Event.experiment_id == self.exp_id).order_by(Event.id))  # type: ignore[arg-type]
                if kind is None or e.kind == kind]


def world(tmp_path: Path, *, slurm_traits: bool = False, cluster: ClusterConfig | None = None,
          **cfg: Any) -> World:
    """A store with one ACTIVE experiment (``cfg`` merged into a random search of a toy
    trial) and a ``Recorder``; its trials are not created (``World.add_trials``)."""
    raw: dict[str, Any] = {
        "name": "t", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6}},
        "searcher": {"name": "random", "metric": "validation_loss", "max_length": 8,
                     "max_trials": 4, "max_concurrent_trials": 2}}
    raw.update(cfg)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw))
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    cluster = cluster or ClusterConfig(runs_root=tmp_path / "runs",
                                       pools={"default": ResourcePool(name="default")})
    backend = Recorder(tmp_path / "spool", slurm_traits=slurm_traits)
    exp_id = create_experiment(store, cluster, load_experiment_config(path), TOY, backend)
    backend.calls.clear()
    return World(store, cluster, backend, exp_id)
