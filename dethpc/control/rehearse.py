"""Rehearse a preemption or a time limit on a running trial: ``dethpc trial preempt``.

Owns: ``Rehearsal`` (what is rehearsed), ``Target`` (the trial's live job, the pool's
early signal and the grace dethpc promises before the end), ``find_target`` (from the
store, or a ``DethpcError`` saying why not), ``mark`` (the run's ``rehearsal.json``)
and ``rehearse``: it marks the run, sends the pool's early signal to the job's batch
shell as slurmctld does at a preemption (``--signal=B:``, ``send_user_signal``) or ahead
of the time limit, waits up to the pool's ``signal_grace_s`` for the job to requeue
itself, and otherwise requeues it as Slurm would once the grace ran out (its TERM, then
the requeue). Either way the run ends free: ``preempted`` (or ``time_limit`` for a
time-limit rehearsal, recorded so by the job's own decision, ``dethpc.launch.run_end``),
or ``requeued``; none counts against ``max_restarts``.
A trial in a pool worker is rehearsed on the worker that holds it (its lease names the
worker's job): the worker forwards the signal to its trial, hands the trial back when it
checkpointed and requeues itself, as at a real preemption; another worker (or the same,
requeued) resumes it. Its time limit is not rehearsed (a worker's trial ends that as a
preemption).
Must not: decide how the run ends (the job does).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from sqlmodel import select

from dethpc.backends.base import Backend, JobAction, JobState
from dethpc.common.errors import DethpcError, NotFoundError
from dethpc.common.jobref import job_refs
from dethpc.common.kinds import EventKind
from dethpc.common.markers import replace_text
from dethpc.common.paths import ExperimentPaths, TrialPaths
from dethpc.common.worker_queue import LEASE_SEP, WorkerPoolPaths, job_of_worker
from dethpc.config.model import ClusterConfig
from dethpc.control.reconcile import load_config
from dethpc.control.worker_pool_view import PREFIX as POOL_REF_PREFIX
from dethpc.control.worker_pool_view import parse_item_ref
from dethpc.store import Store
from dethpc.store.models import Event, Experiment, Job, Trial

#: seconds between two looks at the job while it has its grace
POLL_S = 1.0


class Rehearsal(StrEnum):
    PREEMPTION = "preemption"
    TIME_LIMIT = "time_limit"


@dataclass(frozen=True)
class Target:
    experiment_id: int
    trial_id: int
    ref: str
    run: int
    signal: str
    grace_s: int
    trial_dir: Path
    #: the trial runs in a pool worker: ``ref`` is the worker's job, which holds it
    pooled: bool = False


@dataclass(frozen=True)
class Outcome:
    target: Target
    #: the job requeued itself within the grace (False: it was requeued as Slurm would)
    by_itself: bool
    waited_s: float

    def summary(self, what: Rehearsal) -> str:
        t = self.target
        how = (f"the job requeued itself after {self.waited_s:.0f} s" if self.by_itself
               else f"the job had not requeued itself after {t.grace_s} s: requeued it "
                    "(Slurm's TERM, then the requeue, as at the end of a preemption's grace)")
        return (f"rehearsed a {what.value.replace('_', ' ')} of trial {t.trial_id}: "
                f"SIG{t.signal} to job {t.ref} (run {t.run}); {how}")


def find_target(store: Store, cluster: ClusterConfig, trial_id: int) -> Target:
    """The trial's running job, or why it cannot be rehearsed."""
    with store.session() as s:
        trial = s.get(Trial, trial_id)
        if trial is None:
            raise NotFoundError(f"no trial {trial_id}")
        exp = s.get(Experiment, trial.experiment_id)
        assert exp is not None
        jobs = [j for j in s.exec(select(Job).where(Job.trial_id == trial_id)) if j.live]
        running = [j for j in jobs if j.ref and j.state == JobState.RUNNING]
        if not running:
            states = ", ".join(f"{j.ref or 'unsubmitted'} {j.state.value}" for j in jobs)
            raise DethpcError(f"trial {trial_id} has no running job to rehearse a preemption "
                              f"on (trial {trial.state.value}; jobs: {states or 'none'}); "
                              "try again once it runs")
        job = running[-1]
        ref, run, pooled = job.ref or "", job.restart_count, False
        if ref.startswith(POOL_REF_PREFIX):
            # a worker runs it: the rehearsal is the worker's preemption (the run's own
            # count is the worker job's, read when the signal goes)
            worker = worker_of(Path(exp.run_dir), ref)
            if worker is None:
                raise DethpcError(f"trial {trial_id}'s work item {ref} is held by no worker "
                                  "right now; try again once a worker runs it")
            ref, run, pooled = worker, -1, True
        pool = cluster.pool(load_config(exp).resources.resource_pool)
        return Target(experiment_id=exp.id or 0, trial_id=trial_id, ref=ref,
                      run=run, signal=pool.signal, grace_s=pool.signal_grace_s,
                      trial_dir=ExperimentPaths(Path(exp.run_dir)).trial(trial_id).root,
                      pooled=pooled)


def worker_of(run_dir: Path, item_ref: str) -> str | None:
    """The job ref of the pool worker that holds work item ``item_ref`` (its lease,
    ``leases/<worker>--<item>.json``); None when no worker holds it."""
    parsed = parse_item_ref(item_ref)
    if parsed is None:
        return None
    leases = WorkerPoolPaths.of_run_dir(run_dir).leases
    for lease in sorted(leases.glob(f"*{LEASE_SEP}{parsed[1]}.json")):
        return job_of_worker(lease.name.rsplit(LEASE_SEP, 1)[0])
    return None


def experiment_targets(store: Store, cluster: ClusterConfig, exp_id: int) -> list[Target]:
    """Every trial of the experiment that has a running job (none: an error)."""
    with store.session() as s:
        if s.get(Experiment, exp_id) is None:
            raise NotFoundError(f"no experiment {exp_id}")
        ids = [t.id for t in s.exec(select(Trial).where(Trial.experiment_id == exp_id))
               if t.id is not None]
    out, why = [], []
    for trial_id in ids:
        try:
            out.append(find_target(store, cluster, trial_id))
        except DethpcError as exc:
            why.append(str(exc))
    if not out:
        raise DethpcError(f"experiment {exp_id} has no running trial to rehearse a "
                          f"preemption on" + (f": {why[0]}" if why else ""))
    return out


def mark(target: Target, what: Rehearsal, now: float) -> None:
    """The run's ``rehearsal.json``, read by the job's decision when its run ends."""
    replace_text(TrialPaths(target.trial_dir).rehearsal, json.dumps(
        {"what": what.value, "job": target.ref, "run": target.run, "time": now}) + "\n")


def requeued(backend: Backend, targets: list[Target]) -> set[str]:
    """The refs whose job left the rehearsed run: Slurm counted a requeue, or the job is
    no longer running."""
    infos = backend.poll(job_refs(t.ref for t in targets))
    return {t.ref for t in targets if (info := infos.get(t.ref)) is not None
            and (info.restart_count > t.run or info.state != JobState.RUNNING)}


def rehearse(store: Store, backend: Backend, targets: list[Target], what: Rehearsal, *,
             wait: bool = True, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> list[Outcome]:
    """Mark each run, send the early signals (one ``scancel`` per pool signal), and
    (``wait``) see each job requeue itself within its grace, or requeue it then.
    Nothing is returned when not waiting."""
    pooled = [t for t in targets if t.pooled]
    if pooled and what is Rehearsal.TIME_LIMIT:
        raise DethpcError(f"trial {pooled[0].trial_id} runs in a pool worker: a worker's time "
                          "limit ends its trial's run as a preemption (the worker hands the "
                          "trial back and requeues itself); rehearse it without --time-limit")
    if any(t.run < 0 for t in targets):   # a worker's run: its job's count, now
        infos = backend.poll(job_refs(t.ref for t in targets if t.run < 0))
        targets = [replace(t, run=infos[t.ref].restart_count) if t.run < 0 and t.ref in infos
                   else t for t in targets]
    now = time.time()
    for t in targets:
        mark(t, what, now)
    for signal in sorted({t.signal for t in targets}):
        backend.cancel(job_refs(t.ref for t in targets if t.signal == signal), signal=signal)
    for t in targets:
        _event(store, t, f"{what.value} rehearsal: SIG{t.signal} sent to job {t.ref} "
                         f"(run {t.run})")
    if not wait:
        return []
    start, left, out = clock(), list(targets), []
    while left:
        waited = clock() - start
        done = requeued(backend, left)
        late = [t for t in left if t.ref not in done and waited >= t.grace_s]
        if late:
            backend.act(job_refs(t.ref for t in late), JobAction.REQUEUE)
        for t in left:
            if t.ref in done or t in late:
                out.append(Outcome(t, t.ref in done, waited))
                _event(store, t, out[-1].summary(what))
        left = [t for t in left if t.ref not in done and t not in late]
        if left:
            sleep(POLL_S)
    return out


def _event(store: Store, target: Target, message: str) -> None:
    with store.session() as s:
        s.add(Event(experiment_id=target.experiment_id, trial_id=target.trial_id,
                    kind=EventKind.REHEARSAL, message=message))
        s.commit()
