"""Driving one experiment's searcher within a tick, and settling trial changes.

Owns: ``SearcherOps`` -- each searcher call made and recorded as an event in the
tick's transaction (``feed``: ``dethpc.searchers.replay`` replays those events into
the same decisions), its actions applied in order (``Create`` a trial unless its
request has one, ``Continue`` a trial to a longer length, ``Stop`` one through
``stops.Stops``, ``Shutdown`` the search), and every ``TrialChange`` a rule hands
back, applied to its trial in field order (``settle``: the one place a trial's exit
reaches the searcher).
Must not: decide what a searcher decides (the searcher does) or how a stop reaches a
trial (``stop_rules``); write files or call a backend. The order of calls is part of
the contract: a daemon killed mid-tick replays them into the same state.
"""

from __future__ import annotations

from typing import Any

from dethpc.common.kinds import EventKind
from dethpc.control.reconcile.changes import TrialChange
from dethpc.control.reconcile.rows import TickRows
from dethpc.control.reconcile.stops import Stops
from dethpc.searchers import replay
from dethpc.searchers.base import Continue, Create, Searcher, Shutdown, Stop
from dethpc.store.bulk import insert_objects
from dethpc.store.models import SearcherState, StopReason, Trial, TrialState


class SearcherOps:
    """The searcher of one experiment's tick."""

    def __init__(self, rows: TickRows, searcher: Searcher, ss: SearcherState,
                 stops: Stops) -> None:
        self.rows, self.searcher, self.ss, self.stops = rows, searcher, ss, stops
        #: searcher calls made this tick (none: its snapshot is the one restored)
        self.calls = 0

    def feed(self, call: replay.SearcherCall, trial: Trial | None = None) -> None:
        """Make one searcher call and apply its actions; the call is recorded as an
        event in this transaction, so replaying the events into a fresh searcher gives
        the same decisions (``dethpc.searchers.replay``)."""
        self.rows.event(replay.EVENT_KIND, replay.format_call(call), trial)
        self.calls += 1
        self.apply(replay.invoke(self.searcher, call))

    def apply(self, actions: list[Any]) -> None:
        creates: list[Create] = []
        for action in actions:
            if isinstance(action, Create):
                creates.append(action)   # a run of them is inserted together
                continue
            self._create(creates)
            creates = []
            if isinstance(action, Continue):
                self._resume(action)
            elif isinstance(action, Stop):
                trial = self.rows.trial_of_request(action.request_id)
                if trial is not None:
                    self.stop(trial, StopReason.STOP)
            elif isinstance(action, Shutdown):
                self.ss.shutdown = True
                self.rows.s.add(self.ss)
        self._create(creates)

    def stop(self, trial: Trial, why: StopReason) -> None:
        """Ask ``trial`` to stop (``Stops.request_stop``); one that stops at once is
        settled now."""
        change = self.stops.request_stop(trial, why)
        if change is not None:
            self.settle(trial, change)

    def settle(self, trial: Trial, change: TrialChange) -> None:
        """Apply ``change`` to ``trial``, in field order; an exit is fed to the searcher
        last (its actions may touch other trials)."""
        if change.needs_job is not None:
            trial.needs_job = change.needs_job
        if change.clear_stop:
            trial.stop_requested_at = None
        if change.state is not None:
            self.rows.set_state(trial, change.state, change.reason)
        if change.note is not None:
            self.rows.event(change.note.kind, change.note.message, trial)
        if change.exited is not None:
            self.feed(replay.exited(trial.request_id, change.exited), trial)

    def _create(self, creates: list[Create]) -> None:
        """A trial for each create whose request has none (a replayed create has one),
        in their order, inserted together (``insert_objects``: no flush of the tick's
        other pending rows per trial, as ``Session.flush`` for the trial's id made)."""
        rows = self.rows
        fresh: list[Create] = []
        for action in creates:
            if action.request_id not in rows.requests:
                rows.requests.add(action.request_id)
                fresh.append(action)
        trials = insert_objects(rows.s, Trial, [
            {"experiment_id": rows.exp_id, "request_id": action.request_id,
             "hparams": dict(action.hparams), "target_length": action.length,
             "validate_at": list(action.validate_at), "needs_job": True}
            for action in fresh])
        for action, trial in zip(fresh, trials, strict=True):
            assert trial.id is not None
            rows.trials[trial.id] = trial
            rows.by_request[trial.request_id] = trial
            rows.event(EventKind.TRIAL_CREATED,
                       f"trial {trial.id} created (request {action.request_id})", trial)

    def _resume(self, action: Continue) -> None:
        trial = self.rows.trial_of_request(action.request_id)
        if trial is None:
            return
        trial.target_length = action.length
        trial.validate_at = list(action.validate_at)
        trial.needs_job = True
        trial.ended_at = None
        self.rows.set_state(trial, TrialState.QUEUED, "promoted")
        self.rows.event(EventKind.PROMOTED, f"trial {trial.id} promoted to length {action.length}",
                        trial)
