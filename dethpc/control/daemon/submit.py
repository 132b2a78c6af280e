"""The submit phase: per experiment, its arrays' throttles, the trials that need a job,
and its worker pool.

Owns: ``SubmitPhase.run`` — for each open experiment, after the lease is checked:
``sync_throttles``, ``Submitter.experiment`` and the worker pool's tending
(``WorkerPoolTender.tend``); a failure is that experiment's alone (Slurm not answering: its
trials wait for the next tick; a full or unwritable ``runs_root``: they wait, and the
daemon says why; anything else fails the experiment: ERROR at once, in sbatch's words,
when none of its jobs reached Slurm yet, else its jobs are killed). ``Submitter.experiment`` — an
ACTIVE experiment's trials that need a job, once its images are ready (the image gate):
into its worker pool's queue, as heterogeneous jobs (one sbatch each, at most
``max_concurrent_trials`` live), or as arrays split at ``MaxArraySize``, within the
submit budget. ``array_chunks``, ``het_room`` and ``failure`` are the pure rules.
Must not: submit for an experiment of a kind the daemon does not submit
(``dethpc sbatch``, detached jobs), or let one experiment's failure stop the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import bindparam
from sqlmodel import select

from dethpc.backends.base import Backend, JobInfo
from dethpc.common.errors import DethpcError
from dethpc.config.model import ExperimentConfig
from dethpc.control.daemon.batches import BatchSubmitter
from dethpc.control.daemon.budget import SubmitBudget
from dethpc.control.daemon.incidents import fail_unstarted, warn_once
from dethpc.control.daemon.pulls import ImageGate
from dethpc.control.daemon.shared import Guard, TickStats, slurm_unreachable
from dethpc.control.daemon.throttles import sync_throttles
from dethpc.control.reconcile import load_config
from dethpc.control.resolved import Resolved
from dethpc.control.worker_pool_tend import WorkerPoolTender
from dethpc.store import Store
from dethpc.store.models import Experiment, ExperimentState, Job, Trial


def array_chunks(n: int, max_array_size: int) -> list[range]:
    """``n`` trials' indices cut into arrays of at most ``max_array_size`` tasks (a size
    below 1 counts as 1)."""
    limit = max(1, max_array_size)
    return [range(start, min(start + limit, n)) for start in range(0, n, limit)]


def het_room(k: int, live: int, waiting: int) -> int:
    """How many of ``waiting`` heterogeneous trials may get a job while ``live`` of the
    experiment's jobs are live, under ``max_concurrent_trials`` ``k`` (0: no limit)."""
    room = waiting if k <= 0 else max(0, k - live)
    return min(room, waiting)


@dataclass(frozen=True)
class Failure:
    """What an experiment's failed submit means: ``error`` for the tick's errors (None:
    not one), and either a warning said once (``warn``: the trials wait) or the
    experiment failed with ``fail``."""

    error: str | None
    warn: str | None = None
    fail: str | None = None


def failure(exc: Exception, runs_root: Path) -> Failure:
    """Slurm not answering is a wait; a file system that cannot take the job scripts is
    a wait the daemon explains; any other ``DethpcError`` fails the experiment."""
    if isinstance(exc, DethpcError):
        if slurm_unreachable(exc):
            # slurmctld restarting: the batch recorded before sbatch stays SUBMITTING,
            # and the next tick's recovery finds it by name or submits it again; nothing
            # is failed for a moment's silence
            return Failure(str(exc), warn=f"Slurm did not answer; the trials wait for the "
                                          f"next tick ({exc})")
        return Failure(str(exc), fail=f"submission failed: {exc}")
    if isinstance(exc, OSError):
        # a full or unwritable runs_root: the batch recorded before the write is retried
        # (recovery) once there is room; the daemon goes on and says why
        message = (f"cannot write the job scripts under {runs_root}: "
                   f"{exc.strerror or exc} (errno {exc.errno}); the trials wait")
        return Failure(message, warn=message)
    raise TypeError(f"not a submit failure: {exc!r}")


#: the trials of an experiment that need a job: each tick's read, built once
_NEED_JOBS = select(Trial).where(
    Trial.experiment_id == bindparam("exp_id"), Trial.needs_job == True  # noqa: E712
).order_by(Trial.id)  # type: ignore[arg-type]


class Submitter:
    def __init__(self, store: Store, backend: Backend, budget: SubmitBudget,
                 batches: BatchSubmitter, gate: ImageGate, worker_pools: WorkerPoolTender) -> None:
        self.store, self.backend, self.budget = store, backend, budget
        self.batches, self.gate, self.worker_pools = batches, gate, worker_pools

    def experiment(self, exp_id: int, resolved: Resolved | None = None) -> int:
        """Submit experiment ``exp_id``'s trials that need a job; how many went out.
        ``resolved``: its (config, pool) as the tick resolved them (None: from its row)."""
        with self.store.read() as s:
            # the trials first: most ticks none needs a job, and the row is not read
            trials = [t for t in s.exec(_NEED_JOBS, params={"exp_id": exp_id})
                      if not t.state.is_terminal]
            if not trials:
                return 0
            exp = s.get(Experiment, exp_id)
            if exp is None or exp.state != ExperimentState.ACTIVE:
                return 0
            if not exp.kind.daemon_submits:
                return 0  # `dethpc sbatch` and detached jobs: never a job from the daemon
        cfg = resolved.cfg if resolved is not None else load_config(exp)
        deps = self.gate.ready(exp_id, cfg)
        if deps is None:
            return 0
        pool = resolved.pool() if resolved is not None else None
        if self.worker_pools.enabled(cfg, exp.kind,
                              resolved.worker_pool() if resolved is not None else None):
            return self.worker_pools.submit_items(exp, cfg, trials, pool=pool)
        if cfg.slurm.components and self.backend.traits.het_jobs:
            return self.het(exp, cfg, trials, deps)
        trials = trials[:self.budget.room(exp, cfg, len(trials), pool=pool)]
        submitted = 0
        for chunk in array_chunks(len(trials), self.backend.max_array_size()):
            if self.budget.refused:
                break
            submitted += self.batches.submit_recorded(
                exp, cfg, trials[chunk.start:chunk.stop], deps=deps, pool=pool)
        return submitted

    def het(self, exp: Experiment, cfg: ExperimentConfig, trials: list[Trial],
            deps: tuple[str, ...]) -> int:
        """Trials with ``slurm.components`` are heterogeneous jobs, which Slurm cannot put
        in an array: one sbatch each, at most ``max_concurrent_trials`` live at once."""
        with self.store.read() as s:
            live = len(list(s.exec(select(Job.id).where(
                Job.experiment_id == exp.id, Job.live == True))))  # noqa: E712
        room = het_room(cfg.searcher.max_concurrent_trials, live, len(trials))
        room = self.budget.room(exp, cfg, room, per_trial=len(cfg.slurm.components))
        submitted = 0
        for t in trials[:room]:
            if self.budget.refused:
                break
            submitted += self.batches.submit_recorded(exp, cfg, [t], array=False, deps=deps)
        return submitted


class SubmitPhase:
    def __init__(self, store: Store, backend: Backend, guard: Guard, submitter: Submitter,
                 worker_pools: WorkerPoolTender, *, runs_root: Path,
                 clock: Callable[[], float] = time.time) -> None:
        self.store, self.backend, self.guard = store, backend, guard
        self.submitter, self.worker_pools, self.runs_root = submitter, worker_pools, runs_root
        self.clock = clock

    def run(self, exp_ids: list[int], infos: dict[str, JobInfo], stats: TickStats, *,
            fresh: bool = True, resolved: Mapping[int, Resolved] | None = None) -> None:
        """``fresh``: ``infos`` come from this tick's poll (``Observed.fresh``).
        ``resolved``: each experiment's (config, pool) as the tick resolved them."""
        for exp_id in exp_ids:
            self.guard.holds()
            r = resolved.get(exp_id) if resolved is not None else None
            try:
                if r is None or r.state is ExperimentState.ACTIVE:
                    sync_throttles(self.store, self.backend, exp_id,
                                   r.cfg if r is not None else None)
                    stats.submitted += self.submitter.experiment(exp_id, r)
                stats.submitted += self.worker_pools.tend(exp_id, infos, fresh=fresh, resolved=r)
            except (DethpcError, OSError) as exc:
                self.failed(exp_id, failure(exc, self.runs_root), stats)

    def failed(self, exp_id: int, what: Failure, stats: TickStats) -> None:
        if what.error is not None:
            stats.errors.append(f"experiment {exp_id}: {what.error}")
        if what.warn is not None:
            warn_once(self.store, exp_id, what.warn)
        if what.fail is not None:
            # refused before any job reached Slurm: ERROR now, in sbatch's words;
            # else its jobs are killed (fail_experiment)
            fail_unstarted(self.store, exp_id, what.fail, self.clock)
