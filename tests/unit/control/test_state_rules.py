"""``dethpc.control.reconcile.state_rules``: what the experiment's state asks of its trials
and its searcher, one row per case; ``experiment_state.ExperimentStates`` enacts them."""

from __future__ import annotations

from itertools import product

import pytest

from dethpc.control.reconcile.state_rules import (
    Finish,
    TrialMove,
    finish,
    kills_jobs,
    search_end,
    search_starts,
    top_up_due,
    trial_move,
)
from dethpc.store.models import ExperimentState, TrialState

E, T, M = ExperimentState, TrialState, TrialMove
OPEN = (T.QUEUED, T.RUNNING, T.WAITING)   # open and not paused
ENDED = (T.COMPLETED, T.STOPPED, T.CANCELED, T.ERROR)
BOTH = (False, True)

# (experiment state, trial state, the trial has a live job) -> move
MOVES = [
    # an ended trial never moves
    *[((e, t, j), M.STAY) for e in E for t in ENDED for j in BOTH],
    # pause: open trials asked to pause; paused ones stay
    *[((E.PAUSED, t, j), M.ASK_PAUSE) for t in OPEN for j in BOTH],
    *[((E.PAUSED, T.PAUSED, j), M.STAY) for j in BOTH],
    # active: paused trials come back; the rest stay
    *[((E.ACTIVE, T.PAUSED, j), M.ACTIVATE) for j in BOTH],
    *[((E.ACTIVE, t, j), M.STAY) for t in OPEN for j in BOTH],
    # cancel: open trials asked to cancel; paused ones (no job) cancelled now
    *[((E.STOPPING_CANCELED, t, j), M.ASK_CANCEL) for t in OPEN for j in BOTH],
    *[((E.STOPPING_CANCELED, T.PAUSED, j), M.CANCEL) for j in BOTH],
    # kill: a trial whose job is cancelled ends with it; one without a job now
    *[((E.STOPPING_KILLED, t, True), M.STAY) for t in (*OPEN, T.PAUSED)],
    *[((E.STOPPING_KILLED, t, False), M.KILL) for t in (*OPEN, T.PAUSED)],
    # an ended experiment asks nothing
    *[((e, t, j), M.STAY) for e in (E.COMPLETED, E.CANCELED, E.ERROR)
      for t in (*OPEN, T.PAUSED) for j in BOTH],
]


@pytest.mark.parametrize(("facts", "move"), MOVES)
def test_trial_move(facts: tuple[ExperimentState, TrialState, bool], move: TrialMove) -> None:
    exp, trial, job = facts
    assert trial_move(exp, trial, has_live_job=job) is move


def test_every_experiment_and_trial_state_has_one_move_row() -> None:
    keys = [facts for facts, _ in MOVES]
    assert len(keys) == len(set(keys))
    assert set(keys) == set(product(E, T, BOTH))


@pytest.mark.parametrize(("state", "kills"), [(e, e == E.STOPPING_KILLED) for e in E])
def test_only_a_kill_cancels_every_job(state: ExperimentState, kills: bool) -> None:
    assert kills_jobs(state) is kills


# (experiment state, searcher shut down, live jobs, open trials, quiet trials) -> finish
FINISH = [
    ((E.STOPPING_CANCELED, False, False, True, False), Finish.CANCELED),
    ((E.STOPPING_CANCELED, True, False, False, False), Finish.CANCELED),
    ((E.STOPPING_CANCELED, False, True, False, False), Finish.NOT_YET),   # a job to wait for
    ((E.STOPPING_KILLED, False, False, True, False), Finish.CANCELED),
    ((E.STOPPING_KILLED, True, True, False, False), Finish.NOT_YET),
    ((E.ACTIVE, True, False, False, False), Finish.SEARCH_ENDED),
    ((E.ACTIVE, True, True, False, False), Finish.SEARCH_ENDED),   # a job of an ended trial
    ((E.ACTIVE, False, False, False, False), Finish.NOT_YET),      # the searcher goes on
    ((E.ACTIVE, True, False, True, False), Finish.NOT_YET),        # a trial is open
    ((E.ACTIVE, True, False, False, True), Finish.NOT_YET),        # a quiet trial is open
    ((E.PAUSED, True, False, False, False), Finish.NOT_YET),
    ((E.COMPLETED, True, False, False, False), Finish.NOT_YET),
    ((E.CANCELED, False, False, False, False), Finish.NOT_YET),
    ((E.ERROR, True, False, False, False), Finish.NOT_YET),
]


@pytest.mark.parametrize(("facts", "how"), FINISH)
def test_finish(facts: tuple[ExperimentState, bool, bool, bool, bool], how: Finish) -> None:
    exp, shutdown, live, open_trials, quiet = facts
    assert finish(exp, shutdown=shutdown, live_jobs=live, open_trials=open_trials,
                  quiet_trials=quiet) is how


@pytest.mark.parametrize(("ok", "state"), [(True, E.COMPLETED), (False, E.ERROR)])
def test_a_search_ends_completed_with_a_good_trial(ok: bool, state: ExperimentState) -> None:
    assert search_end(any_succeeded=ok) is state


@pytest.mark.parametrize(("state", "initialized", "starts"), [
    (E.ACTIVE, False, True), (E.ACTIVE, True, False), (E.PAUSED, False, False),
    (E.STOPPING_CANCELED, False, False), (E.STOPPING_KILLED, False, False)])
def test_search_starts_once_while_active(state: ExperimentState, initialized: bool,
                                         starts: bool) -> None:
    assert search_starts(state, initialized=initialized) is starts


@pytest.mark.parametrize(("state", "last", "current", "due"), [
    (E.ACTIVE, 4, 8, True),        # set-concurrency raised the limit
    (E.ACTIVE, 8, 4, True),        # lowered: the searcher is asked all the same
    (E.ACTIVE, 4, 4, False),
    (E.ACTIVE, None, 4, False),    # the first tick, or a snapshot older than the key
    (E.PAUSED, 4, 8, False),
    (E.STOPPING_CANCELED, 4, 8, False),
])
def test_top_up_due(state: ExperimentState, last: int | None, current: int, due: bool) -> None:
    assert top_up_due(state, last=last, current=current) is due
