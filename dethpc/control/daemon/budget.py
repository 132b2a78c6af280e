"""This tick's submit budget under the user's per-user job limits.

Owns: ``SubmitBudget`` — the tick's view of the user's jobs (the poll's listing plus
what this tick submitted since, ``start_tick`` / ``count_submitted``), ``room`` (how
many trials fit now: an array is cut to the headroom that view leaves, the others wait
in the store for a later tick, with a ``limit`` event said once while it lasts), and a
refusal over a limit (``refusal``, the policy of ``dethpc.control.submission``, whose
ledger gave the work back: nothing more is submitted this tick, and later submissions
are capped, halved on each refusal and doubled on each success, in case the limit is
one dethpc cannot see).
``fits`` is the pure sum. The cap is a hint kept in memory: lost harmlessly on restart.
Must not: run sbatch or decide what a limit is (``dethpc.backends.limits`` does).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlmodel import select

from dethpc.backends.base import Backend, JobInfo, PoolLimits
from dethpc.backends.limits import (
    cap_after_refusal,
    cap_after_success,
    counted_live,
    headroom,
    refusal_is_final,
)
from dethpc.common.errors import SubmitError, SubmitLimitError
from dethpc.config.model import ClusterConfig, ExperimentConfig, ResourcePool
from dethpc.control.daemon.incidents import limit_event
from dethpc.control.daemon.shared import Scope
from dethpc.store import Store
from dethpc.store.models import Experiment, Job


def fits(wanted: int, cap: int | None, free: int | None, per_trial: int = 1) -> int:
    """How many of ``wanted`` trials (``per_trial`` jobs each) to submit: at most ``cap``
    (None: no cap), and, when a submit limit applies (``free`` is its headroom in jobs,
    None: none applies), only as many as fit in it."""
    capped = wanted if cap is None else min(wanted, cap)
    if free is None:
        return capped
    return min(capped, free // max(1, per_trial))


class SubmitBudget:
    def __init__(self, store: Store, cluster: ClusterConfig, backend: Backend,
                 scope: Scope) -> None:
        self.store, self.cluster, self.backend, self.scope = store, cluster, backend, scope
        #: this tick's view of the user's jobs (the poll's listing plus what this tick
        #: submitted since), None when the backend does not list them; and whether
        #: sbatch refused a submission over a limit this tick (no more tries until the
        #: next). Rebuilt every tick.
        self.queue: list[JobInfo] | None = None
        self.refused = False
        #: most trials per submission after sbatch refused one over a limit dethpc
        #: cannot see (halved on each refusal, doubled on each success, None again once
        #: it is back above the refused size): a hint, lost harmlessly on restart
        self.cap: int | None = None
        self.refused_size = 0

    def start_tick(self, user_jobs: Iterable[JobInfo] | None) -> None:
        """A new tick: the poll's listing of the user's jobs, and no refusal yet."""
        self.queue, self.refused = (list(user_jobs) if user_jobs is not None else None), False

    def pool_limits(self, pool: ResourcePool) -> PoolLimits:
        return self.backend.job_limits(pool.partition, pool.qos, pool.account,
                                       pool.sbatch_args)

    def room(self, exp: Experiment, cfg: ExperimentConfig, wanted: int,
             per_trial: int = 1, *, pool: ResourcePool | None = None) -> int:
        """How many of ``wanted`` trials (``per_trial`` jobs each) may be submitted now
        under the user's per-user submit limits; records a ``limit`` event (once while
        it lasts) when some must wait. ``pool``: the config's, as the tick resolved it."""
        if self.refused:
            return 0
        if self.queue is None:
            return fits(wanted, self.cap, None)
        pool = pool or self.cluster.pool(cfg.resources.resource_pool)
        limits = self.pool_limits(pool)
        free = headroom(limits, self.queue)
        n = fits(wanted, self.cap, free, per_trial)
        if free is not None and n < wanted:
            assert exp.id is not None
            limit_event(self.store, exp.id,
                        f"{wanted - n} trial(s) wait: pool {pool.name!r} is at the user's "
                        f"job limit ({'; '.join(map(str, limits.limits))}); they are "
                        "submitted as the user's jobs end")
        return n

    def count_submitted(self, pool: ResourcePool, jobs: int) -> None:
        """Jobs this tick submitted count against the limits until the next poll sees them."""
        if self.queue is not None:
            self.queue += [self.pool_limits(pool).tag()] * jobs

    def count_submitted_for(self, cfg: ExperimentConfig, jobs: int,
                            pool: ResourcePool | None = None) -> None:
        """``count_submitted`` in the resource pool of ``cfg`` (``pool``, when resolved)."""
        self.count_submitted(pool or self.cluster.pool(cfg.resources.resource_pool), jobs)

    def succeeded(self) -> None:
        """sbatch accepted a submission: the cap grows back."""
        self.cap = cap_after_success(self.cap, self.refused_size)

    def refusal(self, exp_id: int, size: int, exc: SubmitLimitError) -> None:
        """sbatch refused a submission of ``size`` trials over a limit: nothing was
        submitted (its ledger gave the work back, ``dethpc.control.submission``), nothing
        more is submitted this tick, and later submissions are capped (halved). Final (a
        ``SubmitError``) only for a single trial while none of the user's jobs is live:
        then nothing will make room."""
        if self.queue is not None:
            live = counted_live(self.queue)
        else:
            with self.store.session() as s:
                live = len(list(s.exec(self.scope.mine(select(Job.id).where(
                    Job.live == True), Job.experiment_id))))  # noqa: E712
        if refusal_is_final(exc.word, live, size):
            raise SubmitError(f"{exc} (and none of the user's jobs is queued or running, "
                              "so waiting would not help)")
        self.refused = True
        self.refused_size = size
        self.cap = cap_after_refusal(size)
        limit_event(self.store, exp_id, f"sbatch refused the submission over a limit "
                    f"({exc.word}); the trials wait and are submitted again on a later tick")
