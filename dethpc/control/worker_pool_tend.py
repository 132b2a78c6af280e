"""The daemon's side of the worker pool: put trials' runs in the pool's queue, keep the
right number of workers, and end the pool with its experiment.

An experiment whose worker-pool setting is enabled (``ClusterConfig.worker_pool``:
``slurm.workers``, or its resource pool's default) gets, instead of one array task per
trial run, one work item per run (a ``Job`` row of a ``BatchKind.ITEMS`` batch whose
ref is the item, ``dethpc.control.worker_pool_view``) and one or more arrays of long-lived workers
(``BatchKind.WORKERS`` batches, no Job rows). Each tick, per such experiment:
expire the leases whose worker stopped renewing them (its node died), then
``plan_workers``: submit workers while items wait that no free worker takes (never more
than live items, at most the pool's size), cancel surplus workers that have not started,
retire running ones the pool no longer wants (idle beyond the live items, or
``set-concurrency``), drain when no work will come. The surplus's cancels go at most
once per ``pool_poll_s`` (``cancel_due``): as an ASHA search winds down its live items
fall tick by tick, and a cancel each tick (each making the next tick poll, each a
squeue and an scancel) was 11 scancels and as many squeues in 8 s of a 256-trial cell,
its peak RPC rate (issue 48); a pending worker costs nothing meanwhile, and one that
starts finds no work and is retired through the pool's files.

Idempotency: an item is put only if it was never put (``queue.known``) and its Job
row commits after, under the name the next tick would compute again (the trial's
count of Job rows), so a daemon killed in between neither loses nor doubles a run. A
worker array is recorded SUBMITTING before sbatch and adopted by name like a trial
batch (the daemon's recover phase, ``dethpc.control.daemon.recovery``).

Owns: ``WorkerPoolTender``, given the daemon's submit budget and trial files (``Budget``,
``TrialFiles``). Must not: judge a run's end (the reconciler does, from
``view.poll_items``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import bindparam, func, update
from sqlmodel import Session, col, select

from dethpc.backends.base import Backend, JobInfo, JobRequest
from dethpc.common import worker_queue as queue
from dethpc.common.errors import SubmitError
from dethpc.common.jobref import JobRef, job_refs
from dethpc.common.kinds import EventKind, ExperimentKind
from dethpc.config.model import ClusterConfig, ExperimentConfig, ResourcePool, WorkerPool
from dethpc.control import worker_pool_view as view
from dethpc.control.bad_nodes import exclusion
from dethpc.control.reconcile import load_config
from dethpc.control.resolved import Resolved
from dethpc.control.run_dirs import RunDirs
from dethpc.control.submission import BatchLedger, RefusalPolicy, Submission, record_batch
from dethpc.jobs.directives import run_limits
from dethpc.jobs.worker_pool_items import work_item, worker_pool_problem
from dethpc.jobs.worker_pool_script import pool_comment, pool_name, worker_array_script
from dethpc.store import Store
from dethpc.store.bulk import insert_rows
from dethpc.store.models import (
    Batch,
    BatchKind,
    BatchState,
    Event,
    Experiment,
    ExperimentState,
    Job,
    Trial,
)

log = logging.getLogger(__name__)


class WorkerPoolMode(Enum):
    OFF = "off"            # one job per trial run
    ON = "on"              # work items and long-lived workers
    REFUSED = "refused"    # the experiment asks for a pool it cannot run in


def worker_pool_mode(cfg: ExperimentConfig, cluster: ClusterConfig, kind: ExperimentKind,
              python: str, wp: WorkerPool | None = None) -> WorkerPoolMode:
    """Whether an experiment runs in a worker pool. A site default (its resource pool's
    ``workers``) applies only to experiments of ``dethpc submit`` that a worker can run
    (``worker_pool_problem``), the others run one job per trial; an experiment's own
    ``slurm.workers`` that cannot be honoured is REFUSED (``check_worker_pool``)."""
    if not (wp or cluster.worker_pool(cfg)).enabled:   # wp: as the tick resolved it
        return WorkerPoolMode.OFF
    fits = kind == ExperimentKind.MANAGED and not worker_pool_problem(cfg, python)
    if fits:
        return WorkerPoolMode.ON
    return WorkerPoolMode.REFUSED if cfg.slurm.workers is not None else WorkerPoolMode.OFF


def check_worker_pool(cfg: ExperimentConfig, cluster: ClusterConfig, kind: ExperimentKind,
                      python: str) -> None:
    """``submit``'s check: an experiment's own ``slurm.workers`` it cannot run in."""
    if worker_pool_mode(cfg, cluster, kind, python) is not WorkerPoolMode.REFUSED:
        return
    why = (worker_pool_problem(cfg, python) if kind == ExperimentKind.MANAGED else
           "only experiments of `dethpc submit` run in a pool (this one's jobs are the "
           "user's own scripts)")
    raise SubmitError(f"slurm.workers: the worker pool cannot run this experiment: {why}; "
                      "remove slurm.workers (or set it to false) to run one job per trial")


#: each tick's reads, built once (a statement's construction was about as much CPU as its
#: execution: issue 47 item 2): the submitted worker arrays of some experiments; one
#: experiment's row columns, its submitted worker arrays, and its live items
_WORKER_ARRAYS = select(Batch.array_job_id, Batch.size, Batch.experiment_id).where(
    col(Batch.experiment_id).in_(bindparam("exp_ids", expanding=True)),
    Batch.kind == BatchKind.WORKERS, Batch.state == BatchState.SUBMITTED)
_ROW = select(Experiment.kind, Experiment.run_dir, Experiment.state).where(
    Experiment.id == bindparam("exp_id"))
_ARRAYS = select(Batch.id, Batch.array_job_id, Batch.size).where(
    Batch.experiment_id == bindparam("exp_id"), Batch.kind == BatchKind.WORKERS,
    Batch.state == BatchState.SUBMITTED)
_LIVE_ITEMS = select(func.count(col(Job.id))).join(
    Batch, col(Batch.id) == Job.batch_id).where(
    Job.experiment_id == bindparam("exp_id"), Job.live == True,   # noqa: E712
    Batch.kind == BatchKind.ITEMS)


def worker_pool_size(wp: WorkerPool, cfg: ExperimentConfig, live_items: int) -> int:
    """Workers the pool may hold: its ``count``, else ``max_concurrent_trials``, else
    one per live item."""
    return wp.count or cfg.searcher.max_concurrent_trials or max(1, live_items)


class Budget(RefusalPolicy, Protocol):
    """The daemon's submit budget under the user's job limits (``SubmitBudget``)."""

    def room(self, exp: Experiment, cfg: ExperimentConfig, wanted: int,
             per_trial: int = 1, *, pool: ResourcePool | None = None) -> int: ...

    def count_submitted_for(self, cfg: ExperimentConfig, jobs: int,
                            pool: ResourcePool | None = None) -> None: ...


class TrialFiles(Protocol):
    """What writes a trial's files and job script (the daemon's ``TrialFiles``)."""

    def write(self, exp: Experiment, cfg: ExperimentConfig, trial: Trial, *,
              script: bool = True) -> Path: ...


def cancel_due(last_at: float | None, now: float, every_s: float) -> bool:
    """Whether the pool's surplus may be cancelled now: its first cancel at once, then
    at most once per ``every_s`` (``pool_poll_s``; 0: every tick)."""
    return last_at is None or every_s <= 0 or now - last_at >= every_s


class WorkerPoolTender:
    def __init__(self, store: Store, cluster: ClusterConfig, backend: Backend, *,
                 python: str, tag: str, budget: Budget, files: TrialFiles,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store, self.cluster, self.backend = store, cluster, backend
        self.python, self.tag, self.budget, self.files = python, tag, budget, files
        self.monotonic = monotonic
        #: when this tender last cancelled workers (``cancel_due``), per experiment
        self._cancelled_at: dict[int, float] = {}
        #: worker tasks this tender has cancelled, and the ticks whose plan wanted a
        #: cancel on states an older poll gave (put off): either makes the next tick poll
        self.workers_cancelled = 0
        self.cancels_put_off = 0
        #: the worker tasks the last ``worker_refs`` named (the tick's poll asks about them)
        self.polled_workers: frozenset[str] = frozenset()
        #: each experiment's run directory (it never changes once set), read once
        self._run_dirs = RunDirs(store)

    def enabled(self, cfg: ExperimentConfig, kind: ExperimentKind,
                wp: WorkerPool | None = None) -> bool:
        return worker_pool_mode(cfg, self.cluster, kind, self.python, wp) is WorkerPoolMode.ON

    # ------------------------------------------------------------------ poll
    def worker_refs(self, exp_ids: list[int]) -> dict[str, int]:
        """The worker tasks to poll this tick (ref -> experiment): every task of each
        submitted worker array of the open experiments."""
        refs: dict[str, int] = {}
        if exp_ids:
            with self.store.read() as s:   # three columns, no Batch objects
                rows = list(s.exec(_WORKER_ARRAYS, params={"exp_ids": exp_ids}))
            refs = {str(JobRef(job, task=i)): exp_id for job, size, exp_id in rows
                    if job for i in range(size)}
        self.polled_workers = frozenset(refs)
        return refs

    def present_workers(self, refs: Mapping[str, int],
                        resolved: Mapping[int, Resolved]) -> set[str]:
        """Of the worker tasks ``refs`` (ref -> experiment, ``worker_refs``), those whose
        ``pool/alive`` file was renewed within three of their pool's heartbeats
        (``queue.present``); an experiment not in ``resolved`` has none."""
        by_exp: dict[int, set[str]] = {}
        for ref, exp_id in refs.items():
            by_exp.setdefault(exp_id, set()).add(ref)
        out: set[str] = set()
        now = time.time()
        for exp_id, paths in self.pool_paths(list(by_exp)).items():
            r = resolved.get(exp_id)
            wp = r.worker_pool() if r is not None else None
            if wp is not None:
                out |= queue.present(paths, 3 * wp.heartbeat_s, now) & by_exp[exp_id]
        return out

    def poll_items(self, refs: list[str]) -> dict[str, JobInfo]:
        """``view.poll_items`` for every experiment's item refs."""
        by_exp: dict[int, list[str]] = {}
        for ref in refs:
            parsed = view.parse_item_ref(ref)
            if parsed is not None:
                by_exp.setdefault(parsed[0], []).append(ref)
        out: dict[str, JobInfo] = {}
        for exp_id, paths in self.pool_paths(list(by_exp)).items():
            out.update(view.poll_items(paths, by_exp[exp_id]))
        return out

    def cancel_items(self, refs: list[str]) -> None:
        by_exp: dict[int, list[str]] = {}
        for ref in refs:
            parsed = view.parse_item_ref(ref)
            if parsed is not None:
                by_exp.setdefault(parsed[0], []).append(ref)
        for exp_id, paths in self.pool_paths(list(by_exp)).items():
            view.cancel_items(paths, by_exp[exp_id])

    def pool_paths(self, exp_ids: list[int]) -> dict[int, queue.WorkerPoolPaths]:
        """Each experiment's pool directory; read from its row once (an experiment's run
        directory is set when it is created and never changes: the poll of its items
        each tick read the row again)."""
        return {e: queue.WorkerPoolPaths.of_run_dir(Path(d))
                for e, d in self._run_dirs.of(exp_ids).items()}

    # ------------------------------------------------------------------ items
    def submit_items(self, exp: Experiment, cfg: ExperimentConfig, trials: list[Trial], *,
                     pool: ResourcePool | None = None) -> int:
        """One item per trial that needs a run; their Job rows in one ITEMS batch.
        ``pool``: the config's resource pool as the tick resolved it."""
        assert exp.id is not None
        run_dir = Path(exp.run_dir)
        paths = queue.WorkerPoolPaths.of_run_dir(run_dir).create()
        pool = pool or self.cluster.pool(cfg.resources.resource_pool)
        with self.store.session() as s:
            batch = Batch(experiment_id=exp.id, pool=pool.name, size=len(trials),
                          kind=BatchKind.ITEMS, state=BatchState.SUBMITTED)
            s.add(batch)
            s.flush()
            assert batch.id is not None
            batch.name = f"items-{batch.id}"
            ids = [t.id for t in trials]
            runs: dict[int, int] = {}
            for trial_id in s.exec(select(Job.trial_id).where(col(Job.trial_id).in_(ids))):
                runs[trial_id] = runs.get(trial_id, 0) + 1
            # the trials as the submit phase read them this tick, their needs_job cleared
            # by one UPDATE and their job rows in one INSERT (a get and an ORM Job per
            # trial were a sixth of the daemon's CPU in a pool search; loading the
            # trials again to clear the flag (an UPDATE per row), most of what was left)
            jobs: list[dict[str, Any]] = []
            for index, t in enumerate(trials):
                assert t.id is not None
                seq = int(runs.get(t.id, 0))
                name = queue.item_name(t.id, seq)
                ref = view.item_ref(exp.id, name)
                self.files.write(exp, cfg, t, script=False)   # a worker runs the item
                if not queue.known(paths, name):
                    item = work_item(cfg, self.cluster, backend=self.backend.traits.kind,
                                     python=self.python, run_dir=run_dir, exp_id=exp.id,
                                     trial_id=t.id, seq=seq)
                    queue.enqueue(paths, replace(item, ref=ref))
                jobs.append({"experiment_id": exp.id, "trial_id": t.id, "batch_id": batch.id,
                             "array_index": index, "ref": ref})
            s.execute(update(Trial).where(col(Trial.id).in_(ids)).values(needs_job=False),
                      execution_options={"synchronize_session": False})
            insert_rows(s, Job, jobs)
            s.add(batch)
            insert_rows(s, Event, [{
                "experiment_id": exp.id, "kind": EventKind.SUBMITTED,
                "message": f"batch {batch.id}: {len(trials)} trial run(s) put in the "
                           "worker pool's queue"}])
        return len(trials)

    # ------------------------------------------------------------------ workers
    def tend(self, exp_id: int, infos: dict[str, JobInfo], *, fresh: bool = True,
             resolved: Resolved | None = None) -> int:
        """Expire stale leases and apply ``plan_workers``; the workers submitted (those
        cancelled are counted in ``workers_cancelled``). ``fresh`` False: ``infos`` are
        an older poll's (``Poller``): a worker read PENDING there may be running a trial
        now, so a cancel the plan wants waits for the next tick's poll. ``resolved``:
        the experiment's (config, pool) as the tick resolved them: an experiment without
        a worker pool costs no transaction."""
        wp = resolved.worker_pool() if resolved is not None else None
        if resolved is not None and wp is not None and not (
                resolved.kind.daemon_submits and self.enabled(resolved.cfg, resolved.kind, wp)):
            return 0
        with self.store.read() as s:
            # the row's columns a tick needs (the whole row, config text and all, only
            # without the tick's config or to submit workers)
            row = s.exec(_ROW, params={"exp_id": exp_id}).first()
            if row is None:
                return 0
            kind, run_dir, state = ExperimentKind(row[0]), row[1], ExperimentState(row[2])
            if not kind.daemon_submits:
                return 0
            paths = queue.WorkerPoolPaths.of_run_dir(Path(run_dir))
            if not paths.root.is_dir():    # no pool was ever set up: nothing to parse
                return 0
            if resolved is not None:
                cfg = resolved.cfg
            else:
                exp_row = s.get(Experiment, exp_id)
                assert exp_row is not None
                cfg = load_config(exp_row)
            wp = wp or self.cluster.worker_pool(cfg)
            if not self.enabled(cfg, kind, wp):
                return 0
            workers: list[view.Worker] = []
            ended: list[int] = []
            for batch_id, job_id, size in s.exec(_ARRAYS, params={"exp_id": exp_id}):
                refs = [str(JobRef(str(job_id), task=i)) for i in range(size)]
                if any(r not in infos for r in refs):
                    _ended(s, ended)
                    return 0    # the poll could not tell: decide nothing on a guess
                states = [infos[r].state for r in refs]
                if all(st.is_terminal for st in states) and batch_id is not None:
                    ended.append(batch_id)
                workers += [view.Worker(r, st) for r, st in zip(refs, states, strict=True)]
            _ended(s, ended)
            live_items = s.exec(_LIVE_ITEMS, params={"exp_id": exp_id}).one()
            active = state == ExperimentState.ACTIVE
        # a fresh poll that sees a worker's job no longer running (its node crashed and
        # Slurm requeued it, or it ended) hands back the leases it stopped renewing now,
        # not lease_timeout_s after their last heartbeat
        gone = view.gone_workers(workers) if fresh else set()
        back = queue.expire(paths, wp.lease_timeout_s, gone=gone, missed_s=wp.heartbeat_s)
        if back:
            log.warning("experiment %s: lease(s) of %s expired or their worker's job "
                        "ended; handed back", exp_id, ", ".join(i.name for i in back))
        waiting = len(queue.pending(paths))
        retired = _listdir(paths.retire)
        plan = view.plan_workers(worker_pool_size(wp, cfg, live_items), workers, waiting=waiting,
                                 live_items=live_items, active=active, retired=retired,
                                 busy=view.busy_workers(paths))
        if plan.drain:
            paths.drain.touch()
        elif plan.undrain:
            paths.drain.unlink(missing_ok=True)
        if plan.retire or plan.keep:
            queue.retire(paths, plan.retire, keep=plan.keep)
        cancel = plan.cancel
        now = self.monotonic()
        if cancel and not cancel_due(self._cancelled_at.get(exp_id), now,
                                     self.cluster.pool_poll_s):
            cancel = ()     # the last cancel was moments ago: the surplus waits (no poll)
        if cancel and not fresh:
            self.cancels_put_off += 1
            cancel = ()
        if cancel:
            self.backend.cancel(job_refs(cancel))
            self.workers_cancelled += len(cancel)
            self._cancelled_at[exp_id] = now
        if plan.retire or cancel:
            self.event(exp_id, EventKind.WORKERS, f"pool shrinks: cancelled {list(cancel)}, "
                       f"retiring {list(plan.retire)} after their run")
        if plan.submit and active:
            with self.store.read() as s:
                exp = s.get(Experiment, exp_id)
            if exp is None:
                return 0
            return self.submit_workers(exp, cfg, wp, plan.submit,
                                       pool=resolved.pool() if resolved is not None else None)
        return 0

    def submit_workers(self, exp: Experiment, cfg: ExperimentConfig, wp: WorkerPool,
                       n: int, *, pool: ResourcePool | None = None) -> int:
        assert exp.id is not None
        pool = pool or self.cluster.pool(cfg.resources.resource_pool)
        n = self.budget.room(exp, cfg, n, pool=pool)
        if n <= 0:
            return 0
        # new workers keep off the nodes where the experiment's runs keep failing (the
        # workers already there are not retired for it)
        exclude, exclude_note = exclusion(self.store, exp.id, cfg, pool, time.time())
        run_dir = Path(exp.run_dir)
        paths = queue.WorkerPoolPaths.of_run_dir(run_dir).create()
        batch = record_batch(self.store, exp.id, pool.name, BatchKind.WORKERS,
                             lambda batch_id: pool_name(exp.id or 0, batch_id, self.tag),
                             size=n)
        assert batch.id is not None
        script = paths.root / f"workers-b{batch.id}.sbatch"
        script.write_text(worker_array_script(
            cfg, self.cluster, backend=self.backend.traits.kind, run_dir=run_dir,
            exp_id=exp.id, python=self.python, preload=wp.preload,
            heartbeat_s=wp.heartbeat_s, idle_exit_s=wp.idle_exit_s, batch_id=batch.id,
            tag=self.tag))
        limits = run_limits(cfg, pool)
        request = JobRequest(
            name=batch.name, comment=pool_comment(exp.id, batch.id, self.tag), script=script,
            workdir=paths.root, array_indices=tuple(range(n)),
            time_limit_s=limits.time_limit_s, signal=limits.signal,
            signal_lead_s=limits.signal_lead_s,
            extra_args=(exclude,) if exclude else ())
        # a refusal over a limit is the budget's to answer, as for trial batches
        refs = Submission(self.backend, self.budget).submit(
            BatchLedger(self.store, batch), request, exclude_note)
        if refs:
            self.budget.count_submitted_for(cfg, len(refs), pool)
        return 0    # workers run trials; the trials were counted when their items were put

    def event(self, exp_id: int, kind: EventKind, message: str) -> None:
        with self.store.session() as s:
            s.add(Event(experiment_id=exp_id, kind=kind, message=message))


def _ended(s: Session, batch_ids: list[int]) -> None:
    """The worker arrays whose every task ended, marked so (seldom: loaded only then)."""
    for batch_id in batch_ids:
        batch = s.get(Batch, batch_id)
        assert batch is not None
        batch.state = BatchState.ENDED
        s.add(batch)


def _listdir(path: Path) -> list[str]:
    try:
        return [p.name for p in path.iterdir()]
    except FileNotFoundError:
        return []

