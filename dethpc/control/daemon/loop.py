"""The daemon: one reconcile loop of idempotent ticks, each a sequence of named phases.

Owns: ``Daemon.tick()`` — the order of the phases, read top to bottom — and
``Daemon.run()``, the loop that ticks and waits with back-off. The phases are units of
their own (``dethpc.control.daemon``'s modules): recover, poll (the tasks' jobs too:
``tasks``), reconcile, cancel,
submit (throttles, trials, the worker pool), the image gate, housekeeping, the hang
watchdog and the watch between ticks. Backend calls per tick do not grow with the
number of trials: one poll, at most one cancel (and one stack-dump signal), one sbatch
per batch of new trials.
Must not: hold state outside the store and the run directories (a killed daemon loses
nothing and submits nothing twice; what the phases keep in memory is a hint), call the
backend per job, or decide anything a phase decides.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dethpc.backends.base import Backend, JobAction
from dethpc.common.errors import DethpcError
from dethpc.common.jobref import job_refs
from dethpc.common.traits import BackendKind
from dethpc.config.model import ClusterConfig
from dethpc.control.adoption import Adopter
from dethpc.control.daemon.batches import BatchSubmitter, TrialFiles
from dethpc.control.daemon.budget import SubmitBudget
from dethpc.control.daemon.cancel import Canceller
from dethpc.control.daemon.housekeeping import CheckpointDeleter
from dethpc.control.daemon.poll import Poller
from dethpc.control.daemon.pulls import ImageGate
from dethpc.control.daemon.reconciling import Reconciling
from dethpc.control.daemon.recovery import Recovery
from dethpc.control.daemon.shared import Guard, LeaseLost, Scope, TickStats
from dethpc.control.daemon.submit import SubmitPhase, Submitter
from dethpc.control.daemon.tasks import TaskWatch
from dethpc.control.daemon.watch import Watched, Watcher, next_delay
from dethpc.control.daemon.watchdog import Watchdog
from dethpc.control.lease import Lease
from dethpc.control.worker_pool_tend import WorkerPoolTender
from dethpc.jobs.containers import PULL_TIMEOUT_S
from dethpc.jobs.imagepull import Puller
from dethpc.jobs.jobscript import instance_tag
from dethpc.jobs.render import make_env
from dethpc.store import Store

log = logging.getLogger(__name__)


class Daemon:
    def __init__(self, store: Store, cluster: ClusterConfig, backend: Backend,
                 *, clock: Callable[[], float] = time.time, lease: Lease | None = None,
                 owner: str | None = None, wake: Path | None = None) -> None:
        self.store, self.cluster, self.backend, self.clock = store, cluster, backend, clock
        self.owner, self.lease = owner, lease
        self.scope, self.guard = Scope(owner), Guard(lease)
        python, tag, jenv = cluster.python or sys.executable, instance_tag(store.url), make_env()
        #: jobs dethpc did not submit that registered themselves in the spool
        self.adopter = Adopter(store, cluster.runs_root, cluster.backend,
                               runs_mode=cluster.runs_mode)
        self.budget = SubmitBudget(store, cluster, backend, self.scope)
        files = TrialFiles(cluster, backend, python=python, jenv=jenv)
        #: experiments run by a worker pool (``slurm.workers``): items and workers
        self.worker_pools = WorkerPoolTender(store, cluster, backend, python=python, tag=tag,
                                budget=self.budget, files=files)
        self.canceller = Canceller(store, backend, self.worker_pools, self.guard)
        self.recovery = Recovery(store, backend, self.scope, self.guard, self.canceller,
                                 runs_root=cluster.runs_root)
        self.pulls = ImageGate(store, cluster, backend, python=python, tag=tag, clock=clock,
                               policy=self.budget)
        #: interactive tasks' and TensorBoard's jobs on this backend, in the one poll
        self.tasks = TaskWatch(store, self.scope, BackendKind.parse(cluster.backend))
        self.poller = Poller(store, backend, self.worker_pools, self.scope,
                             pool_poll_s=cluster.pool_poll_s,
                             pool_quiet_poll_s=cluster.pool_quiet_poll_s, actions=lambda: (
                                 self.canceller.jobs_cancelled + self.worker_pools.workers_cancelled
                                 + self.worker_pools.cancels_put_off), tasks=self.tasks)
        self.checkpoints = CheckpointDeleter(store)
        self.reconciling = Reconciling(store, clock, self.guard, self.canceller,
                                       self.checkpoints)
        self.submitter = Submitter(store, backend, self.budget, BatchSubmitter(
            store, cluster, backend, self.budget, files, tag=tag, jenv=jenv),
            self.pulls, self.worker_pools)
        self.submitting = SubmitPhase(store, backend, self.guard, self.submitter, self.worker_pools,
                                      runs_root=cluster.runs_root, clock=clock)
        self.watcher = Watcher(store, cluster, self.scope, wake)
        self.watchdog = Watchdog(store, cluster, backend, clock,
                                 workers=lambda: self.worker_pools.polled_workers)

    # ------------------------------------------------------------------ tick
    def tick(self) -> TickStats:
        """One pass of the phases. Their reads share one store session (``Store.tick``:
        one read transaction where there were a dozen, each phase's writes still
        committed before the side effects that follow them)."""
        with self.store.tick():
            return self._tick()

    def _tick(self) -> TickStats:
        self.guard.holds()
        self.watcher.mark()                     # a result or wake from now ends the next wait
        stats = TickStats()
        stats.changed = self.adopter.scan() > 0   # detached jobs: one listdir of the spool
        self.recovery.retry_cancels(stats)        # scancels an earlier tick could not make
        # the open experiments, each one's (config, pool) resolved once for every phase
        opened = self.scope.open_resolved(self.store, self.cluster)
        exp_ids = list(opened)
        stats.experiments = len(exp_ids)
        if not exp_ids:
            self.tasks_alone(stats)
            return stats
        self.recovery.adopt(stats)                # batches a crash left SUBMITTING
        seen = self.poller.observe(stats, exp_ids, resolved=opened)  # one poll of every live job
        self.tasks.record(seen.infos, stats, fresh=seen.fresh)   # tasks' jobs that ended
        # pre-pull jobs that trials wait on, polled after them: Slurm kills a dependent
        # job only after its pull ended, so a trial job seen cancelled by a failed pull
        # has that pull's end seen here, and the experiment fails with the runtime's
        # words before the reconciler judges the cancelled job (polled first, a pull
        # that failed in between left only "cancelled" and an ended experiment)
        self.pulls.check()
        self.budget.start_tick(seen.user_jobs)
        # ingest, feed the searchers, judge job ends; then the checkpoints GC doomed
        cancel = self.reconciling.run(exp_ids, seen.infos, stats, opened, live=seen.live)
        if self.reconciling.release:   # held after a failed launch or expedited requeue
            self.backend.act(job_refs(self.reconciling.release), JobAction.RELEASE)
            stats.changed = True
        # running trials without progress: stacks asked for, then their jobs ended
        cancel += self.watchdog.run(exp_ids, seen.infos, stats, opened)
        self.canceller.cancel_wanted(cancel, stats)            # one scancel
        self.submitting.run(exp_ids, seen.infos, stats,        # throttles, sbatch, worker pools
                            fresh=seen.fresh, resolved=opened)
        return stats

    def catch_up(self) -> TickStats:
        """What the backend did to the open experiments' jobs while no daemon ran, read
        and judged as a tick judges it, and nothing new submitted: one poll (squeue, and
        one sacct for the jobs that left the queue), the reconcile, and the cancels it
        decides. No recovery, adoption, image pulls or submit phase: for a view
        (``experiment list``/``describe``) that finds no daemon running."""
        self.guard.holds()
        stats = TickStats()
        exp_ids = self.scope.open_experiments(self.store)
        stats.experiments = len(exp_ids)
        if not exp_ids:
            return stats
        seen = self.poller.observe(stats, exp_ids, force=True)
        self.tasks.record(seen.infos, stats)
        self.budget.start_tick(seen.user_jobs)
        cancel = self.reconciling.run(exp_ids, seen.infos, stats, live=seen.live)
        self.canceller.cancel_wanted(cancel, stats)
        return stats

    def tasks_alone(self, stats: TickStats) -> None:
        """No experiment is open: the live tasks' jobs, when there are any, in one poll
        (without them, no backend call)."""
        if self.tasks.live():
            self.guard.holds()
            self.tasks.record(self.poller.observe(stats, [], force=True).infos, stats)

    def tick_once(self) -> TickStats:
        """One pass for cron (``dethpc daemon tick``): a tick, and when it started an image
        pull (``containers.pull: login``), the wait for it and one more tick. Without that
        pass the pull's end would die with this process, and a failed pull would be tried
        again by every cron pass and never fail its experiment."""
        stats = self.tick()
        return self.tick() if self.pulls.settle(timeout=PULL_TIMEOUT_S) else stats

    def holds(self) -> None:
        """Raise ``LeaseLost`` unless this daemon still holds its lease."""
        self.guard.holds()

    # ------------------------------------------------------------------ loop
    def run(self, *, until_idle: bool = False, max_ticks: int | None = None,
            should_stop: Callable[[], bool] = lambda: False) -> int:
        """Tick until told to stop; sleep ``tick_min_s`` after a busy tick, doubling up
        to ``tick_max_s`` while idle. ``until_idle`` returns once no experiment is open."""
        delay, ticks = self.cluster.tick_min_s, 0
        while not should_stop():
            refreshed = False
            try:
                with self.store.tick():     # the watch's read joins the tick's reads
                    stats = self.tick()
                    refreshed = self.watcher.before_wait()
            except LeaseLost as exc:
                log.error("%s", exc)
                break
            except DethpcError as exc:
                log.error("tick failed: %s", exc)
                stats = TickStats(experiments=1)
            ticks += 1
            if until_idle and stats.experiments == 0:
                break
            if max_ticks is not None and ticks >= max_ticks:
                break
            delay = next_delay(delay, stats.busy, self.cluster.tick_min_s,
                               self.cluster.tick_max_s)
            try:
                if self.wait(delay, should_stop, refreshed=refreshed):
                    delay = self.cluster.tick_min_s
            except LeaseLost as exc:
                log.error("%s", exc)
                break
        return ticks

    # ------------------------------------------------------------------ between ticks
    def wait(self, seconds: float, should_stop: Callable[[], bool], *,
             refreshed: bool = False) -> bool:
        """``Watcher.wait`` with this daemon's fast path (``fast_tick``)."""
        return self.watcher.wait(seconds, should_stop, self.fast_tick, refreshed=refreshed)

    def fast_tick(self, grown: dict[int, set[int]]) -> bool:
        """``Reconciling.fast``: the grown metrics files ingested, no poll."""
        return self.reconciling.fast(grown)

    def refresh_watch(self) -> None:
        self.watcher.refresh()

    def woken(self) -> bool:
        return self.watcher.woken()

    @property
    def wake(self) -> Path | None:
        return self.watcher.wake

    @wake.setter
    def wake(self, path: Path | None) -> None:
        self.watcher.wake = path

    @property
    def watch(self) -> dict[int, Watched]:
        return self.watcher.watch

    # ------------------------------------------------------------------ phases by name
    @property
    def puller(self) -> Puller | None:
        return self.pulls.puller

    def adopt(self, stats: TickStats) -> None:
        self.recovery.adopt(stats)

    def submit_experiment(self, exp_id: int) -> int:
        return self.submitter.experiment(exp_id)

    def delete_checkpoints(self, doomed: dict[str, str]) -> None:
        self.checkpoints.delete(doomed)
