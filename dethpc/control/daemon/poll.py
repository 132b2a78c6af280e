"""The poll phase: every live job's state, in one backend call per tick.

Owns: ``Poller.observe`` — the refs of every live job of this daemon's experiments plus
the open experiments' pool workers and the live tasks' jobs (``TaskWatch.refs``: a
notebook, shell, command or TensorBoard job), polled with one ``backend.poll`` (Slurm:
one ``squeue``, and one ``sacct`` only for refs that left the queue); a worker pool's items
read from its directory (``dethpc.control.worker_pool_view``); then the user's jobs as the
backend lists them (``user_jobs``: Slurm answers from that same ``squeue``), which the
submit phase counts against per-user limits. ``poll_plan`` is pure.
The live jobs are read once a tick (``live_rows``: each with its trial's columns, by
experiment): their refs are polled, and the reconcile takes the rows (``Observed.live``).
The cadence (``poll_due``, pure): while the only backend jobs are worker-pool workers
(the runs' progress and ends come through the worker pools' files), the backend is asked at
most every ``pool_poll_s`` and the last answer stands in between; any other live job,
a ref not in the last answer (a worker just submitted), or a job cancelled or a cancel
put off since (``actions``: the daemon's count of them) polls at once. While every
worker's ``pool/alive`` file agrees with that last answer (``workers_accounted``: each
worker it said runs renewed its file within three heartbeats, none it said ended has
one) the cadence is ``pool_quiet_poll_s`` instead: a worker that exits removes its file
and one killed stops renewing it, so an end shows in the files before Slurm is asked.
``Observed.fresh`` says which it was: a worker read PENDING by an older poll may have
started since, so the pool's tender cancels nothing on it (it asks for a poll instead).
Must not: call the backend per job or per experiment, or record what it saw (the
reconciler does).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass

from sqlalchemy import select as sa_select
from sqlmodel import Session

from dethpc.backends.base import Backend, JobInfo, JobState
from dethpc.common.jobref import JobRef, job_refs
from dethpc.control.daemon.shared import Scope, TickStats
from dethpc.control.daemon.tasks import TaskWatch
from dethpc.control.reconcile.skip_rules import LiveRow
from dethpc.control.resolved import Resolved
from dethpc.control.worker_pool_tend import WorkerPoolTender
from dethpc.control.worker_pool_view import is_item_ref
from dethpc.store import Store
from dethpc.store.models import Experiment, Job, Trial

#: the tables the live rows' query reads (Core: no ORM row processing)
JOB = Job.__table__  # type: ignore[attr-defined]
TRIAL = Trial.__table__  # type: ignore[attr-defined]
EXPERIMENT = Experiment.__table__  # type: ignore[attr-defined]
#: experiment id -> its live jobs' rows, as the tick's one read of them left them
LiveRows = Mapping[int, list[LiveRow]]


def live_rows(s: Session, scope: Scope) -> dict[int, list[LiveRow]]:
    """Every live job in ``scope`` with its trial's columns (``LiveRow``), by experiment:
    the tick's one read of the live jobs' rows. The poll takes their refs; the reconcile
    its experiment's rows (``TickRows.load``): at 50,000 trials each of them read the
    35,000 live rows apart (bench/tick_scale)."""
    j, t = JOB.c, TRIAL.c
    query = sa_select(
        j.experiment_id, j.id, j.trial_id, j.ref, j.state, j.restart_count, j.unknown_ticks,
        j.reason, j.nodes, t.state, t.steps_completed, t.restarts, t.runs,
        t.stop_requested_at).join_from(JOB, TRIAL, t.id == j.trial_id).where(
        j.live == True)  # noqa: E712
    if scope.owner is not None:
        query = query.where(j.experiment_id.in_(sa_select(EXPERIMENT.c.id).where(
            EXPERIMENT.c.owner == scope.owner)))
    out: dict[int, list[LiveRow]] = {}
    make = LiveRow._make
    for row in s.execute(query):
        rows = out.get(row[0])
        if rows is None:
            rows = out[row[0]] = []
        rows.append(make(row[1:]))
    return out


@dataclass(frozen=True)
class PollPlan:
    """What one poll asks: ``jobs`` of the backend, ``items`` of the worker pools' directories;
    ``polled`` is the count a tick reports."""

    jobs: list[JobRef]
    items: list[str]
    polled: int


def poll_plan(live: Sequence[str], workers: Sequence[str]) -> PollPlan:
    """The live jobs' refs split into backend jobs and pool items, with the pool workers
    added to the jobs. ``polled`` counts the live refs, and the workers too when no item
    is live (as the daemon has always counted them)."""
    items = [r for r in live if is_item_ref(r)]
    jobs = job_refs([*(r for r in live if not is_item_ref(r)), *workers])
    return PollPlan(jobs, items, len(live) + (0 if items else len(workers)))


def poll_due(*, since_last_s: float | None, jobs: Sequence[str], last_jobs: frozenset[str],
             workers_only: bool, dirty: bool, pool_poll_s: float,
             accounted: Callable[[], bool] = lambda: False,
             quiet_poll_s: float = 0.0) -> bool:
    """Whether this tick asks the backend: always, unless every job to ask about is a
    pool worker the last poll answered for (``workers_only``, ``last_jobs``), no job was
    cancelled since (``dirty``), and that poll is younger than ``pool_poll_s``
    (``since_last_s``; None: there was none), or younger than ``quiet_poll_s`` when the
    workers' files agree with it (``accounted``, asked only then)."""
    if since_last_s is None or dirty or not workers_only or pool_poll_s <= 0:
        return True
    if not set(jobs) <= last_jobs:
        return True
    if since_last_s < pool_poll_s:
        return False
    return since_last_s >= quiet_poll_s or not accounted()


def workers_accounted(last: Mapping[str, JobInfo], workers: Sequence[str],
                      present: Set[str]) -> bool:
    """Whether the workers' ``pool/alive`` files (``present``: those renewed within three
    heartbeats) agree with the last poll's answer (``last``): each worker it said runs
    (or is suspended) is present, and none it said ended is; a pending one may be
    either (it may have started since: the tender cancels nothing on an older answer).
    A worker the answer lacks, or one of a worker version without the file, disagrees."""
    for ref in workers:
        info = last.get(ref)
        if info is None:
            return False
        if info.state is JobState.PENDING:
            continue
        if (ref in present) == info.state.is_terminal:
            return False
    return True


@dataclass(frozen=True)
class Observed:
    """One poll's answer: each polled ref's state, and the user's jobs (None: the backend
    does not list them)."""

    infos: dict[str, JobInfo]
    user_jobs: Sequence[JobInfo] | None
    #: the backend was asked this tick (False: the last answer stood, ``poll_due``);
    #: what may be stale must not decide a cancel (``WorkerPoolTender.tend``)
    fresh: bool = True
    #: the live jobs' rows this poll's refs were read from (``live_rows``), for the
    #: reconcile; None: not read
    live: LiveRows | None = None


class Poller:
    def __init__(self, store: Store, backend: Backend, worker_pools: WorkerPoolTender,
                 scope: Scope, *, pool_poll_s: float = 0.0, pool_quiet_poll_s: float = 0.0,
                 monotonic: Callable[[], float] = time.monotonic,
                 actions: Callable[[], int] = lambda: 0,
                 tasks: TaskWatch | None = None) -> None:
        self.store, self.backend, self.scope = store, backend, scope
        self.worker_pools = worker_pools
        #: the live tasks' jobs, asked in the same call (None: none are)
        self.tasks = tasks
        self.pool_poll_s, self.monotonic, self.actions = pool_poll_s, monotonic, actions
        self.pool_quiet_poll_s = pool_quiet_poll_s
        #: the last backend answer (when, for which jobs, what it said), and the count
        #: of cancels then: one since makes the next tick poll (``poll_due``)
        self._last_at: float | None = None
        self._last: dict[str, JobInfo] = {}
        self._actions_then = 0
        #: whether the last ``poll`` asked the backend
        self.fresh = True
        #: backend polls made and skipped (for tests and benchmarks)
        self.polls = self.skipped = 0
        #: the last ``poll``'s read of the live jobs' rows (``live_rows``)
        self.live: LiveRows = {}

    def observe(self, stats: TickStats, exp_ids: list[int], *, force: bool = False,
                resolved: Mapping[int, Resolved] | None = None) -> Observed:
        infos = self.poll(stats, exp_ids, force=force, resolved=resolved)
        return Observed(infos, self.backend.user_jobs(), fresh=self.fresh, live=self.live)

    def poll(self, stats: TickStats, exp_ids: list[int], *, force: bool = False,
             resolved: Mapping[int, Resolved] | None = None) -> dict[str, JobInfo]:
        """Every live job's state in one backend call, even without refs: a backend that
        lists the user's jobs (to count them against per-user limits) does it in this
        one query. Between two polls of a pool's workers (``poll_due``) the last
        answer stands; ``force`` polls anyway. ``resolved``: the open experiments'
        configs (their pools' heartbeats), without which the quiet cadence is off."""
        with self.store.read() as s:
            # the rows as columns, no Job objects; read once, shared with the reconcile
            self.live = live_rows(s, self.scope)
        refs = [row.ref for rows in self.live.values() for row in rows if row.ref]
        if self.tasks is not None:
            known = set(refs)
            refs += [r for r in self.tasks.refs() if r not in known]
        worker_exps = self.worker_pools.worker_refs(exp_ids)
        workers = list(worker_exps)
        plan = poll_plan(refs, workers)
        stats.polled = plan.polled
        now, actions = self.monotonic(), self.actions()
        due = force or poll_due(
            since_last_s=None if self._last_at is None else now - self._last_at,
            jobs=plan.jobs, last_jobs=frozenset(self._last), pool_poll_s=self.pool_poll_s,
            workers_only=bool(workers) and len(plan.jobs) == len(workers),
            dirty=actions != self._actions_then, quiet_poll_s=self.pool_quiet_poll_s,
            accounted=lambda: resolved is not None and workers_accounted(
                self._last, workers, self.worker_pools.present_workers(worker_exps, resolved)))
        self.fresh = due
        if due:
            infos = self.backend.poll(plan.jobs)
            self._last_at, self._last, self._actions_then = now, dict(infos), actions
            self.polls += 1
        else:
            infos = {r: self._last[r] for r in plan.jobs if r in self._last}
            self.skipped += 1
        if plan.items:
            infos.update(self.worker_pools.poll_items(plan.items))
        return infos
