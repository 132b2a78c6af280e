"""``dethpc.control.reconcile.stop_rules``: how a stop, pause or cancel reaches a trial,
one row per case; ``stops.Stops`` carries the route out."""

from __future__ import annotations

from itertools import product

import pytest

from dethpc.backends.base import JobInfo, JobState
from dethpc.common.exitcodes import TrialExit
from dethpc.control.reconcile.changes import TrialChange
from dethpc.control.reconcile.stop_rules import (
    StopRoute,
    overdue,
    seen_pending,
    stop_route,
    stop_word,
    stoppable,
    stopped_change,
)
from dethpc.store.models import StopReason, TrialState

T = TrialState
R = StopRoute

# (trial state, has a live job, this poll saw it pending as submitted, asked before)
#   -> route
ROUTES = [
    # ended or paused: a stop means nothing
    *[((state, job, pending, asked), R.IGNORE)
      for state in (T.COMPLETED, T.STOPPED, T.CANCELED, T.ERROR, T.PAUSED)
      for job, pending, asked in product((False, True), repeat=3)],
    # no job runs for it: stopped at once (whatever was asked before)
    ((T.QUEUED, False, False, False), R.AT_ONCE),
    ((T.QUEUED, False, False, True), R.AT_ONCE),
    ((T.RUNNING, False, False, False), R.AT_ONCE),
    ((T.RUNNING, False, False, True), R.AT_ONCE),
    ((T.WAITING, False, False, False), R.AT_ONCE),
    ((T.WAITING, False, False, True), R.AT_ONCE),
    # WAITING (a finished rung) keeps no job running even with a live row
    ((T.WAITING, True, False, False), R.AT_ONCE),
    ((T.WAITING, True, True, False), R.AT_ONCE),
    ((T.WAITING, True, False, True), R.AT_ONCE),
    ((T.WAITING, True, True, True), R.AT_ONCE),
    # its job is pending as submitted: cancelled, the trial stopped now
    ((T.QUEUED, True, True, False), R.CANCEL),
    ((T.QUEUED, True, True, True), R.CANCEL),
    ((T.RUNNING, True, True, False), R.CANCEL),
    ((T.RUNNING, True, True, True), R.CANCEL),
    # its job may be running: the stop file, once
    ((T.QUEUED, True, False, False), R.ASK),
    ((T.RUNNING, True, False, False), R.ASK),
    ((T.QUEUED, True, False, True), R.ASKED),
    ((T.RUNNING, True, False, True), R.ASKED),
]


@pytest.mark.parametrize(("facts", "route"), ROUTES)
def test_stop_route(facts: tuple[TrialState, bool, bool, bool], route: StopRoute) -> None:
    state, job, pending, asked = facts
    assert stop_route(state, has_job=job, pending=pending, asked=asked) is route
    assert stoppable(state) is (route != R.IGNORE)


def test_every_trial_state_and_fact_has_a_route_row() -> None:
    rows = {facts for facts, _ in ROUTES}
    # a pending job without a job is not a fact the caller can state
    wanted = {(s, j, p, a) for s, j, p, a in product(T, *[(False, True)] * 3) if j or not p}
    assert wanted <= rows, sorted(wanted - rows)


def info(state: JobState, restarts: int = 0) -> JobInfo:
    return JobInfo(ref="7_0", state=state, restart_count=restarts)


@pytest.mark.parametrize(("poll", "restart_count", "steps", "pending"), [
    (info(JobState.PENDING), 0, 0, True),
    (None, 0, 0, False),                        # this poll could not tell: not seen
    (info(JobState.RUNNING), 0, 0, False),
    (info(JobState.PENDING, restarts=1), 0, 0, False),   # requeued: it ran
    (info(JobState.PENDING), 1, 0, False),      # the store saw it requeued before
    (info(JobState.PENDING), 0, 3, False),      # its trial trained: not as submitted
    (info(JobState.UNKNOWN), 0, 0, False),
    (info(JobState.COMPLETED), 0, 0, False),
])
def test_seen_pending(poll: JobInfo | None, restart_count: int, steps: int,
                      pending: bool) -> None:
    assert seen_pending(poll, restart_count=restart_count, steps=steps) is pending


@pytest.mark.parametrize(("requested_at", "now", "grace", "due"), [
    (None, 1000.0, 60, False),
    (900.0, 1000.0, 60, True),
    (940.0, 1000.0, 60, False),     # exactly the grace: not yet
    (939.5, 1000.0, 60, True),
    (1000.0, 1000.0, 0, False),
    (999.0, 1000.0, 0, True),
])
def test_overdue(requested_at: float | None, now: float, grace: int, due: bool) -> None:
    assert overdue(requested_at, now=now, grace=grace) is due


@pytest.mark.parametrize(("why", "word"), [
    (StopReason.PAUSE, "pause"), (StopReason.STOP, "stop"), (StopReason.CANCEL, "stop")])
def test_the_stop_file_says_pause_or_stop(why: StopReason, word: str) -> None:
    assert stop_word(why) == word


@pytest.mark.parametrize(("why", "change"), [
    (StopReason.PAUSE, TrialChange(clear_stop=True, state=T.PAUSED, reason="paused")),
    (StopReason.CANCEL, TrialChange(clear_stop=True, state=T.CANCELED, reason="canceled",
                                    exited=TrialExit.STOPPED)),
    (StopReason.STOP, TrialChange(clear_stop=True, state=T.STOPPED,
                                  reason="stopped by the searcher", exited=TrialExit.STOPPED)),
    (None, TrialChange(clear_stop=True, state=T.STOPPED, reason="stopped by the searcher",
                       exited=TrialExit.STOPPED)),
])
def test_stopped_change(why: StopReason | None, change: TrialChange) -> None:
    assert stopped_change(why) == change
