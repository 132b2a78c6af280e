"""The recover phase: what an earlier tick, or a daemon killed mid-tick, left unfinished.

Owns: ``Recovery.retry_cancels`` (jobs the reconciler closed whose ``scancel`` did not
go through, ``Job.cancel_due``, are cancelled again, also when their experiment has
ended since) and ``Recovery.adopt`` (batches recorded SUBMITTING but never confirmed:
the daemon died around sbatch: ``dethpc.control.submission.adopt`` finds each under
its name, adopts it, or fails the batch and gives its trials back, so it is submitted
anew; a batch ``dethpc sbatch`` recorded is left to its submitter while it holds its
lock, and adopted the same way when it died, ``dethpc.control.submitters``).
Must not: submit anything itself (the submit phase submits the trials a failed batch
gave back), or poll per batch (one ``backend.find`` for all of them).
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlmodel import select

from dethpc.backends.base import Backend
from dethpc.common.errors import DethpcError
from dethpc.control.daemon.cancel import Canceller
from dethpc.control.daemon.shared import Guard, Scope, TickStats
from dethpc.control.submission import BatchLedger, Ledger, adopt
from dethpc.control.submitters import unconfirmed
from dethpc.store import Store
from dethpc.store.models import Batch, BatchState, Job

log = logging.getLogger(__name__)


class Recovery:
    def __init__(self, store: Store, backend: Backend, scope: Scope, guard: Guard,
                 canceller: Canceller, *, runs_root: Path) -> None:
        self.store, self.backend, self.scope, self.guard = store, backend, scope, guard
        self.canceller, self.runs_root = canceller, runs_root
        # each tick's two reads, built once (a statement's construction was about as
        # much CPU as its execution: issue 47 item 2)
        self._due = scope.mine(select(Job.ref).where(
            Job.cancel_due == True), Job.experiment_id)  # noqa: E712
        self._submitting = scope.mine(select(Batch).where(
            Batch.state == BatchState.SUBMITTING), Batch.experiment_id)

    def retry_cancels(self, stats: TickStats) -> None:
        """One indexed query and, only when some jobs are due, one ``scancel``; a failure
        is this tick's error and the next tick tries again."""
        with self.store.read() as s:
            due = sorted({r for r in s.exec(self._due) if r})
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
        with self.store.read() as s:
            pending = list(s.exec(self._submitting))
            if not pending:
                return
            theirs, orphans = unconfirmed(s, self.store, pending, self.runs_root)
            ledgers: list[Ledger] = [BatchLedger(self.store, b) for b in pending
                                     if b.id not in theirs]
            ledgers += orphans
            if not ledgers:
                return
        adopt(self.backend, ledgers)
        stats.changed = True
