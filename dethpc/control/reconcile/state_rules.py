"""What the experiment's state asks of its trials and its searcher: pure rules.

Owns: ``trial_move`` (what an open trial does under the experiment's state: asked to
pause or cancel, activated, cancelled or killed now, or nothing), ``kills_jobs`` (every
live job is cancelled), ``finish`` (the experiment ends this tick: cancelled, or its
search ended) and ``search_end`` (COMPLETED or ERROR), ``search_starts`` and
``top_up_due`` (the searcher's first call, and a refill after ``set-concurrency``).
Must not: touch rows or files, or call the searcher (``experiment_state`` and the
coordinator act on them).
"""

from __future__ import annotations

from enum import StrEnum

from dethpc.store.models import ExperimentState, TrialState


class TrialMove(StrEnum):
    STAY = "stay"              # nothing this tick
    ASK_PAUSE = "ask_pause"    # asked to checkpoint and exit; PAUSED when it has
    ASK_CANCEL = "ask_cancel"  # asked to checkpoint and exit; CANCELED when it has
    ACTIVATE = "activate"      # a paused trial: stop file removed, QUEUED for a new job
    CANCEL = "cancel"          # a paused trial of a cancelled experiment: CANCELED now
    KILL = "kill"              # no live job left to cancel: CANCELED ("killed") now


def trial_move(exp: ExperimentState, trial: TrialState, *, has_live_job: bool) -> TrialMove:
    """The move of one trial (an ended trial stays)."""
    if trial.is_terminal:
        return TrialMove.STAY
    paused = trial == TrialState.PAUSED
    if exp == ExperimentState.PAUSED:
        return TrialMove.STAY if paused else TrialMove.ASK_PAUSE
    if exp == ExperimentState.ACTIVE:
        return TrialMove.ACTIVATE if paused else TrialMove.STAY
    if exp == ExperimentState.STOPPING_CANCELED:
        return TrialMove.CANCEL if paused else TrialMove.ASK_CANCEL
    if exp == ExperimentState.STOPPING_KILLED:
        return TrialMove.STAY if has_live_job else TrialMove.KILL
    return TrialMove.STAY


def kills_jobs(exp: ExperimentState) -> bool:
    """Every live job of the experiment is cancelled now (a kill)."""
    return exp == ExperimentState.STOPPING_KILLED


class Finish(StrEnum):
    NOT_YET = "not_yet"
    CANCELED = "canceled"          # cancelled or killed, no live job left: open trials too
    SEARCH_ENDED = "search_ended"  # the searcher shut down and no trial is open


def finish(exp: ExperimentState, *, shutdown: bool, live_jobs: bool, open_trials: bool,
           quiet_trials: bool) -> Finish:
    """``open_trials``: a loaded trial neither ended nor WAITING; ``quiet_trials``: a
    trial not loaded this tick because its job is pending as submitted (open too)."""
    if exp in (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED):
        return Finish.NOT_YET if live_jobs else Finish.CANCELED
    if exp == ExperimentState.ACTIVE and shutdown and not open_trials and not quiet_trials:
        return Finish.SEARCH_ENDED
    return Finish.NOT_YET


def search_end(*, any_succeeded: bool) -> ExperimentState:
    """A search that ended with a COMPLETED or STOPPED trial completed; else it failed."""
    return ExperimentState.COMPLETED if any_succeeded else ExperimentState.ERROR


def search_starts(exp: ExperimentState, *, initialized: bool) -> bool:
    """The searcher's initial call is due (once, while the experiment is active)."""
    return exp == ExperimentState.ACTIVE and not initialized


def top_up_due(exp: ExperimentState, *, last: int | None, current: int) -> bool:
    """``max_concurrent_trials`` changed since the last tick (``set-concurrency``): the
    searcher is asked to fill the new room. ``last`` None: the first tick, or a snapshot
    older than the key."""
    return exp == ExperimentState.ACTIVE and last not in (None, current)
