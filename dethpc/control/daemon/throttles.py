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

from sqlmodel import select

from dethpc.backends.base import Backend
from dethpc.common.kinds import EventKind
from dethpc.config.model import ExperimentConfig
from dethpc.control.reconcile import load_config
from dethpc.store import Store
from dethpc.store.models import Batch, BatchState, Event, Experiment, ExperimentState, Job


def throttle_for(k: int, size: int) -> int:
    """An array's ``%K`` for ``max_concurrent_trials`` ``k`` (0: no throttle)."""
    return min(k, size) if k > 0 else 0


def throttle_changes(k: int, batches: Iterable[Batch],
                     live_batches: set[int]) -> list[tuple[Batch, int]]:
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


def sync_throttles(store: Store, backend: Backend, exp_id: int,
                   cfg: ExperimentConfig | None = None) -> int:
    """Apply ``throttle_changes`` to experiment ``exp_id``'s arrays; how many changed.
    ``cfg``: its config as the tick resolved it (None: read from its row)."""
    if cfg is not None and cfg.slurm.components and backend.traits.het_jobs:
        return 0  # heterogeneous trials are single jobs, no arrays to throttle
    with store.read() as s:
        exp = s.get(Experiment, exp_id)
        if exp is None or exp.state != ExperimentState.ACTIVE or not exp.kind.daemon_submits:
            return 0  # the throttle of a job someone else submitted is theirs
        cfg = cfg if cfg is not None else load_config(exp)
        if cfg.slurm.components and backend.traits.het_jobs:
            return 0  # heterogeneous trials are single jobs, no arrays to throttle
        live = set(s.exec(select(Job.batch_id).where(
            Job.experiment_id == exp_id, Job.live == True)))  # noqa: E712
        batches = s.exec(select(Batch).where(
            Batch.experiment_id == exp_id, Batch.state == BatchState.SUBMITTED))
        changes = throttle_changes(cfg.searcher.max_concurrent_trials, batches, live)
        for batch, want in changes:
            assert batch.array_job_id is not None
            backend.set_throttle(batch.array_job_id, want)
            s.add(Event(experiment_id=exp_id, kind=EventKind.THROTTLE,
                        message=f"job {batch.array_job_id}: ArrayTaskThrottle "
                                f"{batch.throttle} -> {want}"))
            batch.throttle = want
            s.add(batch)
        return len(changes)
