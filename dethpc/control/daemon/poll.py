"""The poll phase: every live job's state, in one backend call per tick.

Owns: ``Poller.observe`` — the refs of every live job of this daemon's experiments plus
the open experiments' pool workers, polled with one ``backend.poll`` (Slurm: one
``squeue``, and one ``sacct`` only for refs that left the queue); a worker pool's items
read from its directory (``dethpc.control.pool_view``); then the user's jobs as the
backend lists them (``user_jobs``: Slurm answers from that same ``squeue``), which the
submit phase counts against per-user limits. ``poll_plan`` is pure.
Must not: call the backend per job or per experiment, or record what it saw (the
reconciler does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlmodel import select

from dethpc.backends.base import Backend, JobInfo
from dethpc.control.daemon.shared import Scope, TickStats
from dethpc.control.pool_tend import PoolTender
from dethpc.control.pool_view import is_item_ref
from dethpc.store import Store
from dethpc.store.models import Job


@dataclass(frozen=True)
class PollPlan:
    """What one poll asks: ``jobs`` of the backend, ``items`` of the pools' directories;
    ``polled`` is the count a tick reports."""

    jobs: list[str]
    items: list[str]
    polled: int


def poll_plan(live: Sequence[str], workers: Sequence[str]) -> PollPlan:
    """The live jobs' refs split into backend jobs and pool items, with the pool workers
    added to the jobs. ``polled`` counts the live refs, and the workers too when no item
    is live (as the daemon has always counted them)."""
    items = [r for r in live if is_item_ref(r)]
    jobs = [r for r in live if not is_item_ref(r)] + list(workers)
    return PollPlan(jobs, items, len(live) + (0 if items else len(workers)))


@dataclass(frozen=True)
class Observed:
    """One poll's answer: each polled ref's state, and the user's jobs (None: the backend
    does not list them)."""

    infos: dict[str, JobInfo]
    user_jobs: Sequence[JobInfo] | None


class Poller:
    def __init__(self, store: Store, backend: Backend, pools: PoolTender,
                 scope: Scope) -> None:
        self.store, self.backend, self.pools, self.scope = store, backend, pools, scope

    def observe(self, stats: TickStats, exp_ids: list[int]) -> Observed:
        infos = self.poll(stats, exp_ids)
        return Observed(infos, self.backend.user_jobs())

    def poll(self, stats: TickStats, exp_ids: list[int]) -> dict[str, JobInfo]:
        """Every live job's state in one backend call, even without refs: a backend that
        lists the user's jobs (to count them against per-user limits) does it in this
        one query."""
        with self.store.session() as s:
            # the refs alone: no Job objects built for a list of strings
            refs = [ref for ref in s.exec(self.scope.mine(select(Job.ref).where(
                Job.live == True), Job.experiment_id))  # noqa: E712
                    if ref]
        plan = poll_plan(refs, list(self.pools.worker_refs(exp_ids)))
        stats.polled = plan.polled
        infos = self.backend.poll(plan.jobs)
        if plan.items:
            infos.update(self.pools.poll_items(plan.items))
        return infos
