"""The cancel phase: everything the experiments want cancelled, in one call.

Owns: ``Canceller`` — ``cancel`` (one ``scancel`` for the jobs, a worker pool's items
through its directory; afterwards none of them is due a cancel any more,
``Job.cancel_due``) and ``cancel_wanted`` (the tick's phase: the reconciled experiments'
refs, deduplicated and sorted, after the lease is checked). ``split_refs`` is pure.
Must not: decide what to cancel (the reconciler does) or catch a failed ``scancel``: the
tick's caller sees it, and the refs stay due (``recovery`` retries them).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlmodel import select

from dethpc.backends.base import Backend
from dethpc.common.jobref import JobRef, job_refs
from dethpc.control.daemon.shared import Guard, TickStats
from dethpc.control.worker_pool_tend import WorkerPoolTender
from dethpc.control.worker_pool_view import is_item_ref
from dethpc.store import Store
from dethpc.store.models import Job


def split_refs(refs: Iterable[str]) -> tuple[list[str], list[JobRef]]:
    """``(items, jobs)``: a worker pool's item refs and the backend's job refs, each in
    the order given."""
    refs = list(refs)
    return [r for r in refs if is_item_ref(r)], job_refs(r for r in refs if not is_item_ref(r))


def wanted_refs(wanted: Iterable[str]) -> list[str]:
    """What one ``cancel`` gets: each ref once, sorted."""
    return sorted(set(wanted))


class Canceller:
    def __init__(self, store: Store, backend: Backend, worker_pools: WorkerPoolTender,
                 guard: Guard) -> None:
        self.store, self.backend, self.guard = store, backend, guard
        self.worker_pools = worker_pools
        #: backend jobs cancelled so far, between ticks too (the poll asks again after one)
        self.jobs_cancelled = 0

    def cancel_wanted(self, wanted: list[str], stats: TickStats) -> None:
        """The tick's cancel phase: nothing without refs; else the lease, then one
        ``cancel`` of them all."""
        if not wanted:
            return
        self.guard.holds()
        refs = wanted_refs(wanted)
        self.cancel(refs)
        stats.cancelled += len(refs)

    def cancel(self, refs: list[str]) -> None:
        """``scancel`` the jobs in one call; a worker pool's items through its directory.
        Once that went through, none of them is due a cancel any more (``cancel_due``)."""
        items, jobs = split_refs(refs)
        if items:
            self.worker_pools.cancel_items(items)
        if jobs:
            self.backend.cancel(jobs)
            self.jobs_cancelled += len(jobs)
        self.cancels_done(refs)

    def cancels_done(self, refs: list[str]) -> None:
        """``refs`` were cancelled: none of them is due any more. The due jobs are few
        (read through their index), the refs of a kill may be thousands."""
        done = set(refs)
        with self.store.session() as s:
            for job in s.exec(select(Job).where(Job.cancel_due == True)):  # noqa: E712
                if job.ref in done:
                    job.cancel_due = False
                    s.add(job)
