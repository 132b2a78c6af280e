"""Enacting the experiment's state on its trials, and ending the experiment.

Owns: ``ExperimentStates`` -- pause, activate, cancel and kill carried to every open
trial as ``state_rules.trial_move`` says (stop requests through the searcher driver, a
kill's refs to ``Outcome.cancel``), and the experiment's end when ``state_rules.finish``
says so (the last open trials cancelled or completed, the end recorded as an event).
Must not: decide (``state_rules``), call a backend or delete anything.
"""

from __future__ import annotations

from sqlmodel import col, select

from dethpc.common.kinds import EventKind
from dethpc.control.reconcile.changes import TrialChange
from dethpc.control.reconcile.rows import TickRows
from dethpc.control.reconcile.searcher_ops import SearcherOps
from dethpc.control.reconcile.state_rules import (
    Finish,
    TrialMove,
    finish,
    kills_jobs,
    search_end,
    trial_move,
)
from dethpc.store.models import ExperimentState, StopReason, Trial, TrialState

#: a trial of a killed experiment that has no live job left
KILLED = TrialChange(needs_job=False, state=TrialState.CANCELED, reason="killed")


class ExperimentStates:
    """The experiment's own state within one tick."""

    def __init__(self, rows: TickRows, ops: SearcherOps) -> None:
        self.rows, self.ops = rows, ops

    def enact(self) -> None:
        rows = self.rows
        state = rows.exp.state
        active = [t for t in rows.trials.values() if not t.state.is_terminal]
        if kills_jobs(state):
            for job in rows.live.values():
                if job.ref and job.ref not in rows.out.cancel:
                    rows.out.cancel.append(job.ref)
        for t in active:
            move = trial_move(state, t.state, has_live_job=rows.live_job(t) is not None)
            if move == TrialMove.ASK_PAUSE:
                self.ops.stop(t, StopReason.PAUSE)
            elif move == TrialMove.ASK_CANCEL:
                self.ops.stop(t, StopReason.CANCEL)
            elif move == TrialMove.ACTIVATE:
                rows.tpaths(t).stop.unlink(missing_ok=True)
                t.stop_reason, t.needs_job = None, True
                rows.set_state(t, TrialState.QUEUED, "activated")
            elif move == TrialMove.CANCEL:
                rows.set_state(t, TrialState.CANCELED, "canceled")
            elif move == TrialMove.KILL:
                self.ops.settle(t, KILLED)

    def finish_if_done(self) -> None:
        rows = self.rows
        how = finish(rows.exp.state, shutdown=self.ops.ss.shutdown, live_jobs=bool(rows.live),
                     open_trials=any(not t.state.is_terminal and t.state != TrialState.WAITING
                                     for t in rows.trials.values()),
                     quiet_trials=bool(rows.quiet))
        if how == Finish.CANCELED:
            for t in rows.trials.values():
                if not t.state.is_terminal:
                    rows.set_state(t, TrialState.CANCELED, "canceled")
            self.end(ExperimentState.CANCELED)
        elif how == Finish.SEARCH_ENDED:
            for t in rows.trials.values():
                if t.state == TrialState.WAITING:
                    rows.set_state(t, TrialState.COMPLETED, "search ended")
            ok = rows.s.exec(select(Trial.id).where(
                Trial.experiment_id == rows.exp_id,
                col(Trial.state).in_([TrialState.COMPLETED, TrialState.STOPPED]))).first() \
                is not None
            self.end(search_end(any_succeeded=ok))

    def end(self, state: ExperimentState) -> None:
        rows = self.rows
        rows.exp.state = state
        rows.exp.ended_at = rows.now
        rows.event(EventKind.ENDED, f"experiment {state.value.lower()}")
