"""Enacting stop, pause and cancel requests on one experiment's trials.

Owns: ``Stops`` -- a stop request carried to a trial by the route ``stop_rules``
chooses (the trial's change handed back for the searcher driver to settle, its pending
job cancelled and closed, or the ``stop`` file written and the request noted), and the
cancel of jobs that outlived ``stop_grace_s`` (``stop_overdue``).
Must not: choose the route (``stop_rules``), call the searcher (the caller settles the
change: ``searcher_ops.SearcherOps.stop``) or a backend (refs go to ``Outcome.cancel``).
"""

from __future__ import annotations

from dethpc.common.kinds import EventKind
from dethpc.control.reconcile.changes import TrialChange
from dethpc.control.reconcile.rows import TickRows
from dethpc.control.reconcile.stop_rules import (
    StopRoute,
    overdue,
    seen_pending,
    stop_route,
    stop_word,
    stoppable,
    stopped_change,
)
from dethpc.store.models import StopReason, Trial


class Stops:
    """Stop requests of one experiment's tick."""

    def __init__(self, rows: TickRows) -> None:
        self.rows = rows

    def request_stop(self, trial: Trial, why: StopReason) -> TrialChange | None:
        """Ask a trial to checkpoint and exit; a trial not yet running just stops: its
        change comes back (None: the trial stops later, or not at all)."""
        if not stoppable(trial.state):
            return None
        rows = self.rows
        job = rows.live_job(trial)
        trial.stop_reason = why
        trial.needs_job = False
        info = rows.infos.get(job.ref) if job is not None and job.ref else None
        route = stop_route(trial.state, has_job=job is not None,
                           pending=job is not None and seen_pending(
                               info, restart_count=job.restart_count,
                               steps=trial.steps_completed),
                           asked=trial.stop_requested_at is not None)
        change = None
        if route == StopRoute.AT_ONCE:
            change = stopped_change(why)
        elif route == StopRoute.CANCEL and job is not None:
            rows.out.cancel.append(job.ref or "")
            job.cancel_due = True   # the daemon clears it once scancel has gone through
            rows.close_job(job)
            change = stopped_change(why)
        elif route == StopRoute.ASK:
            tp = rows.tpaths(trial)
            tp.root.mkdir(parents=True, exist_ok=True)
            tp.stop.write_text(stop_word(why))
            trial.stop_requested_at = rows.now
            rows.event(EventKind.STOP_REQUESTED,
                       f"{why.value}: asked trial {trial.id} to checkpoint and exit", trial)
        rows.s.add(trial)
        return change

    def stop_overdue(self, grace: int) -> None:
        """Cancel the jobs of trials asked to stop more than ``grace`` seconds ago."""
        rows = self.rows
        for trial in rows.trials.values():
            if not overdue(trial.stop_requested_at, now=rows.now, grace=grace):
                continue
            job = rows.live_job(trial)
            if job is not None and job.ref and job.ref not in rows.out.cancel:
                rows.out.cancel.append(job.ref)
                rows.event(EventKind.STOP_TIMEOUT, f"trial {trial.id} did not exit within {grace}s "
                           "of the stop request; cancelling its job", trial)
