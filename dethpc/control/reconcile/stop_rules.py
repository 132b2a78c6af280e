"""How a trial is stopped, paused or cancelled: pure rules.

Owns: ``stop_route`` -- how a stop request reaches a trial: not at all (ended or
paused), at once (no job runs for it), by cancelling its job (this poll saw it pending
as submitted), by the ``stop`` file, or not again (asked already) -- with
``seen_pending`` (the poll's view that allows the cancel), ``stop_word`` (what the
stop file says), ``overdue`` (a request past ``stop_grace_s``: its job is cancelled)
and ``stopped_change`` (what a trial whose stop took effect becomes).
Must not: touch rows or files (``stops.Stops`` does) or call the searcher.
"""

from __future__ import annotations

from enum import StrEnum

from dethpc.backends.base import JobInfo, JobState
from dethpc.common.exitcodes import TrialExit
from dethpc.control.reconcile.changes import TrialChange
from dethpc.store.models import StopReason, TrialState


class StopRoute(StrEnum):
    IGNORE = "ignore"        # the trial has ended or is paused: nothing to stop
    AT_ONCE = "at_once"      # no job runs for it (none live, or WAITING): stopped now
    CANCEL = "cancel"        # its job is pending as submitted: cancelled, stopped now
    ASK = "ask"              # its job may run: the stop file asks it to checkpoint and exit
    ASKED = "asked"          # asked before: wait (``overdue`` cancels after the grace)


def stoppable(state: TrialState) -> bool:
    """A stop request means something to a trial in ``state``."""
    return not state.is_terminal and state != TrialState.PAUSED


def stop_route(state: TrialState, *, has_job: bool, pending: bool, asked: bool) -> StopRoute:
    """``has_job``: the trial has a live job; ``pending``: this poll saw that job pending
    as submitted (``seen_pending``); ``asked``: a stop was requested before."""
    if not stoppable(state):
        return StopRoute.IGNORE
    if not has_job or state == TrialState.WAITING:
        return StopRoute.AT_ONCE
    if pending:
        return StopRoute.CANCEL
    return StopRoute.ASKED if asked else StopRoute.ASK


def seen_pending(info: JobInfo | None, *, restart_count: int, steps: int) -> bool:
    """This tick's poll (``info``) saw the job pending, never requeued, its trial with
    nothing trained yet: a stop may cancel it instead of asking it to exit. Not the
    stored state: that is the last answering poll's, stale when this poll could not
    tell (Slurm's accounting down, or a tick between polls) -- the job may have run
    meanwhile (a multi-fault run saw a job that ran to its end while the daemon was down
    cancelled and closed as pending, its later validations never fed)."""
    return (info is not None and info.state == JobState.PENDING
            and info.restart_count == 0 and restart_count == 0 and steps == 0)


def stop_word(why: StopReason) -> str:
    """What the ``stop`` file says: a pause is a pause, anything else a stop."""
    return why.value if why == StopReason.PAUSE else StopReason.STOP.value


def overdue(requested_at: float | None, *, now: float, grace: int) -> bool:
    """A stop was requested more than ``grace`` seconds ago: its job is cancelled."""
    return requested_at is not None and now - requested_at > grace


def stopped_change(why: StopReason | None) -> TrialChange:
    """A trial whose stop took effect (its job ended on the request, or it had none):
    paused, cancelled, or stopped by the searcher (no reason stored: the searcher's)."""
    why = why or StopReason.STOP
    if why == StopReason.PAUSE:
        return TrialChange(clear_stop=True, state=TrialState.PAUSED, reason="paused")
    if why == StopReason.CANCEL:
        return TrialChange(clear_stop=True, state=TrialState.CANCELED, reason="canceled",
                           exited=TrialExit.STOPPED)
    return TrialChange(clear_stop=True, state=TrialState.STOPPED,
                       reason="stopped by the searcher", exited=TrialExit.STOPPED)
