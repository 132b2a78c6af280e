"""The recover phase: what an earlier tick, or a daemon killed mid-tick, left unfinished.

Owns: ``Recovery.retry_cancels`` (jobs the reconciler closed whose ``scancel`` did not
go through, ``Job.cancel_due``, are cancelled again, also when their experiment has
ended since) and ``Recovery.adopt`` (batches recorded SUBMITTING but never confirmed:
the daemon died around sbatch. A job found under the batch's name is adopted,
otherwise the batch is failed and its trials need a job again, so it is submitted
anew; a batch ``dethpc sbatch`` recorded is left to its submitter while it holds its
lock, ``dethpc.control.submitters``). ``found_job`` (which job, if any, is the batch's)
is pure.
Must not: submit anything itself (the submit phase submits the trials a failed batch
gave back), or poll per batch (one ``backend.find`` for all of them).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlmodel import Session, select

from dethpc.backends.base import Backend, JobInfo
from dethpc.common.errors import DethpcError
from dethpc.common.jobref import parse_job_id
from dethpc.common.kinds import EventKind
from dethpc.control.daemon.cancel import Canceller
from dethpc.control.daemon.shared import Guard, Scope, TickStats
from dethpc.store import Store
from dethpc.store.models import Batch, BatchState, Event, Experiment, Job, Trial

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Found:
    """The job a batch's name found: ``base`` is the array job id (or the job id), and
    ``is_array`` says whether its tasks are ``<base>_<index>``."""

    base: str
    is_array: bool

    def ref(self, array_index: int) -> str:
        return f"{self.base}_{array_index}" if self.is_array else self.base


def found_job(batch_name: str, found: Sequence[JobInfo]) -> Found | None:
    """The job among ``found`` named ``batch_name``, or None: the batch never reached
    Slurm. "123_4" is an array task, "123" or "123+0" one job (its het components)."""
    tasks = [i for i in found if i.name == batch_name]
    if not tasks:
        return None
    jid = parse_job_id(tasks[0].ref)
    return Found(jid.base, jid.is_array_task)


class Recovery:
    def __init__(self, store: Store, backend: Backend, scope: Scope, guard: Guard,
                 canceller: Canceller, *, runs_root: Path) -> None:
        self.store, self.backend, self.scope, self.guard = store, backend, scope, guard
        self.canceller, self.runs_root = canceller, runs_root

    def retry_cancels(self, stats: TickStats) -> None:
        """One indexed query and, only when some jobs are due, one ``scancel``; a failure
        is this tick's error and the next tick tries again."""
        with self.store.session() as s:
            due = sorted({r for r in s.exec(self.scope.mine(select(Job.ref).where(
                Job.cancel_due == True), Job.experiment_id)) if r})  # noqa: E712
        if not due:
            return
        self.guard.holds()
        try:
            self.canceller.cancel(due)
        except DethpcError as exc:
            stats.errors.append(f"cancelling {len(due)} closed job(s) again: {exc}")
            return
        stats.cancelled += len(due)
        log.info("cancelled %d closed job(s) whose earlier scancel had failed", len(due))

    def adopt(self, stats: TickStats) -> None:
        """Batches recorded but never confirmed, looked up by name with one
        ``backend.find``: adopted when found, failed (their trials need a job) when not."""
        with self.store.session() as s:
            pending = list(s.exec(self.scope.mine(select(Batch).where(
                Batch.state == BatchState.SUBMITTING), Batch.experiment_id)))
            if not pending:
                return
            theirs = self.unconfirmed_of_submitters(s, pending)
            pending = [b for b in pending if b.id not in theirs]
            if not pending:
                return
            found = self.backend.find([b.name for b in pending])
            for batch in pending:
                job = found_job(batch.name, found)
                jobs = list(s.exec(select(Job).where(Job.batch_id == batch.id)))
                if job is not None:
                    _adopted(s, batch, jobs, job)
                else:
                    _not_submitted(s, batch, jobs)
                s.add(batch)
        stats.changed = True

    def unconfirmed_of_submitters(self, s: Session, pending: list[Batch]) -> set[int]:
        """The SUBMITTING batches of kinds the daemon does not submit (``dethpc sbatch``):
        left alone while their submitter holds its lock; failed when it died before it
        recorded the job id. Returns their ids."""
        from dethpc.control.submitters import fail_unconfirmed, submitter_alive

        out: set[int] = set()
        for batch in pending:
            exp = s.get(Experiment, batch.experiment_id)
            if exp is None or exp.kind.daemon_submits or batch.id is None:
                continue
            out.add(batch.id)
            if not submitter_alive(Path(self.runs_root), batch.name):
                fail_unconfirmed(s, batch)
        return out


def _adopted(s: Session, batch: Batch, jobs: list[Job], job: Found) -> None:
    batch.state, batch.array_job_id = BatchState.SUBMITTED, job.base
    for row in jobs:
        row.ref = job.ref(row.array_index)
        s.add(row)
    s.add(Event(experiment_id=batch.experiment_id, kind=EventKind.ADOPTED,
                message=f"adopted job {job.base} of batch {batch.id} after restart"))


def _not_submitted(s: Session, batch: Batch, jobs: list[Job]) -> None:
    batch.state = BatchState.FAILED
    for row in jobs:
        row.live = False
        trial = s.get(Trial, row.trial_id)
        if trial is not None and not trial.state.is_terminal:
            trial.needs_job = True
            s.add(trial)
        s.add(row)
