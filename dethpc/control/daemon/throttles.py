"""Array throttles that follow ``max_concurrent_trials``.

Owns: ``sync_throttles`` — arrays of an ACTIVE experiment still running whose ``%K``
differs from ``max_concurrent_trials`` (changed by ``dethpc experiment
set-concurrency``) get the new limit: one ``scontrol update ArrayTaskThrottle`` per such
array, an event, and the batch's recorded throttle, in one transaction; none in a steady
tick. ``throttle_for`` and ``throttle_changes`` are the pure rule.
Must not: throttle a job the daemon did not submit, or a heterogeneous trial (a single
job, not an array).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Protocol, TypeVar

from sqlalchemy import bindparam, exists
from sqlmodel import col, select

from dethpc.backends.base import Backend
from dethpc.common.kinds import EventKind, ExperimentKind
from dethpc.config.model import ExperimentConfig
from dethpc.control.reconcile import load_config
from dethpc.store import Store
from dethpc.store.models import Batch, BatchState, Event, Experiment, ExperimentState, Job

#: the kinds whose jobs the daemon submitted (``ExperimentKind.daemon_submits``)
SUBMITTED_BY_DAEMON = [k for k in ExperimentKind if k.daemon_submits]


class ArrayRow(Protocol):
    """What ``throttle_changes`` reads of a batch (a ``Batch``, or a row of its columns)."""

    @property
    def id(self) -> int | None: ...
    @property
    def size(self) -> int: ...
    @property
    def throttle(self) -> int: ...
    @property
    def array_job_id(self) -> str | None: ...


A = TypeVar("A", bound=ArrayRow)


class Array(NamedTuple):
    """A submitted array's columns that its throttle is decided by."""

    id: int | None
    size: int
    throttle: int
    array_job_id: str | None


def throttle_for(k: int, size: int) -> int:
    """An array's ``%K`` for ``max_concurrent_trials`` ``k`` (0: no throttle)."""
    return min(k, size) if k > 0 else 0


def throttle_changes(k: int, batches: Iterable[A],
                     live_batches: set[int]) -> list[tuple[A, int]]:
    """The submitted arrays with live jobs whose throttle is not ``throttle_for(k)``,
    each with the throttle it should have, in the order given."""
    out = []
    for batch in batches:
        if batch.id not in live_batches or not batch.array_job_id:
            continue
        want = throttle_for(k, batch.size)
        if want != batch.throttle:
            out.append((batch, want))
    return out


#: a steady tick's one read, built once (its construction, a join and an EXISTS, was
#: about as much CPU as its execution): the submitted arrays with live jobs of an ACTIVE
#: experiment the daemon submits for
_LIVE_ARRAYS = (
    select(Batch.id, Batch.size, Batch.throttle, Batch.array_job_id)
    .join(Experiment, col(Experiment.id) == Batch.experiment_id)
    .where(Batch.experiment_id == bindparam("exp_id"), Batch.state == BatchState.SUBMITTED,
           Experiment.state == ExperimentState.ACTIVE,
           col(Experiment.kind).in_(SUBMITTED_BY_DAEMON),
           exists().where(col(Job.batch_id) == Batch.id, col(Job.live).is_(True)))
    .order_by(col(Batch.id)))


def sync_throttles(store: Store, backend: Backend, exp_id: int,
                   cfg: ExperimentConfig | None = None) -> int:
    """Apply ``throttle_changes`` to experiment ``exp_id``'s arrays; how many changed.
    ``cfg``: its config as the tick resolved it (None: read from its row). With ``cfg``
    a steady tick is one read of four columns of the arrays with live jobs, joined to
    the experiment's state (was three reads, the experiment's row and Batch objects
    among them: issue 47 item 2)."""
    if cfg is not None and cfg.slurm.components and backend.traits.het_jobs:
        return 0  # heterogeneous trials are single jobs, no arrays to throttle
    with store.read() as s:
        if cfg is None:
            exp = s.get(Experiment, exp_id)
            if exp is None:
                return 0
            cfg = load_config(exp)
            if cfg.slurm.components and backend.traits.het_jobs:
                return 0  # heterogeneous trials are single jobs, no arrays to throttle
        # the throttle of a job someone else submitted is theirs (the experiment's kind);
        # the state read here, not the tick's: the reconcile may have ended it since
        arrays = [Array(*row) for row in s.exec(_LIVE_ARRAYS, params={"exp_id": exp_id})]
        changes = throttle_changes(cfg.searcher.max_concurrent_trials, arrays,
                                   {a.id for a in arrays if a.id is not None})
        for row, want in changes:
            assert row.array_job_id is not None
            backend.set_throttle(row.array_job_id, want)
            s.add(Event(experiment_id=exp_id, kind=EventKind.THROTTLE,
                        message=f"job {row.array_job_id}: ArrayTaskThrottle "
                                f"{row.throttle} -> {want}"))
            batch = s.get(Batch, row.id)
            assert batch is not None
            batch.throttle = want
            s.add(batch)
        return len(changes)
