"""``dethpc.control.reconcile.job_rules``: what a poll and a job-end decision do to a job
and its trial, one row per case. ``test_job_end.py`` has the decisions themselves;
these rows are their consequences, messages included (events are part of the store's
contract: ``describe``, the dashboard and the searcher replay read them)."""

from __future__ import annotations

from typing import Any

import pytest

from dethpc.backends.base import JobInfo, JobState
from dethpc.common.exitcodes import ExitReason as R
from dethpc.common.exitcodes import TrialExit
from dethpc.common.kinds import ExperimentKind
from dethpc.control.job_end import Decision, ExitRecord, Kind, Verdict
from dethpc.control.reconcile.changes import Note, TrialChange
from dethpc.control.reconcile.job_rules import (
    NOT_RESUBMITTED,
    EndFacts,
    JobChange,
    JobSeen,
    Observation,
    job_change,
    observe,
    release_held,
    trial_change,
)
from dethpc.store.models import StopReason, TrialState

S, T, V = JobState, TrialState, Verdict


def seen(state: JobState = S.PENDING, unknown: int = 0, reason: str = "",
         nodes: str = "") -> JobSeen:
    return JobSeen(state=state, unknown_ticks=unknown, reason=reason, nodes=nodes)


def poll(state: JobState, reason: str = "", nodes: str = "") -> JobInfo:
    return JobInfo(ref="7_0", state=state, reason=reason, nodes=nodes)


def obs(unknown: int = 0, reason: str | None = None, moved: bool = False, nodes: str = "",
        trial: TrialState | None = None) -> Observation:
    return Observation(unknown_ticks=unknown, reason=reason, moved=moved, nodes=nodes,
                       trial_state=trial)


# (name, stored job, poll, trial state (None: not loaded), observation)
OBSERVE = [
    ("nothing new", seen(), poll(S.PENDING), T.QUEUED, obs()),
    ("a new pending reason", seen(reason="Priority"), poll(S.PENDING, "Resources"), T.QUEUED,
     obs(reason="Resources")),
    ("starts running", seen(), poll(S.RUNNING, nodes="n1"), T.QUEUED,
     obs(moved=True, nodes="n1", trial=T.RUNNING)),
    ("runs on, a node more", seen(S.RUNNING, nodes="n1"), poll(S.RUNNING, nodes="n[1-2]"),
     T.RUNNING, obs(moved=True, nodes="n[1-2]")),
    ("requeued: pending again", seen(S.RUNNING, nodes="n1"), poll(S.PENDING), T.RUNNING,
     obs(moved=True, nodes="n1", trial=T.QUEUED)),
    ("pending, trial paused", seen(S.RUNNING), poll(S.PENDING), T.PAUSED, obs(moved=True)),
    ("running, trial ended", seen(), poll(S.RUNNING), T.STOPPED, obs(moved=True)),
    ("running, trial not loaded", seen(), poll(S.RUNNING), None, obs(moved=True)),
    ("running, trial waiting", seen(), poll(S.RUNNING), T.WAITING,
     obs(moved=True, trial=T.RUNNING)),
    ("ended", seen(S.RUNNING, nodes="n1"), poll(S.COMPLETED, nodes="n1"), T.RUNNING,
     obs(moved=True, nodes="n1")),
    ("lost once", seen(S.RUNNING, reason="x", nodes="n1"), poll(S.UNKNOWN), T.RUNNING,
     obs(unknown=1, moved=True, nodes="n1")),
    ("lost again: the reason is kept", seen(S.UNKNOWN, unknown=1, reason="x"), poll(S.UNKNOWN),
     T.RUNNING, obs(unknown=2)),
    ("seen again", seen(S.UNKNOWN, unknown=2), poll(S.RUNNING), T.RUNNING,
     obs(moved=True)),
]


@pytest.mark.parametrize(("name", "stored", "info", "trial", "expected"), OBSERVE,
                         ids=[row[0] for row in OBSERVE])
def test_observe(name: str, stored: JobSeen, info: JobInfo, trial: TrialState | None,
                 expected: Observation) -> None:
    assert observe(stored, info, trial) == expected


def decision(kind: Kind, verdict: Verdict = V.NONE, reason: R | None = None,
             counted: tuple[int, ...] = (), cancel: bool = False,
             restart_count: int = 0) -> Decision:
    return Decision(kind, verdict, reason=reason, counted_runs=counted, cancel=cancel,
                    restart_count=restart_count)


NODE = "ended without a checkpointed exit (node failure or kill)"
REQUEUED = ("job 7_0 was requeued by Slurm (run 1); not counted: a job dethpc did not "
            "submit leaves no exit record, its own --requeue decided")

# (name, decision, wrapped, restarts before, job change)
JOB_CHANGES = [
    ("ended, nothing counted", decision(Kind.ENDED, V.COMPLETE, R.COMPLETED),
     True, 0, JobChange(close=True)),
    ("ended, the last run counted", decision(Kind.ENDED, V.RESTART, R.ERROR, (0,)),
     True, 1, JobChange(close=True, restarts=("error; restart 2 of 3",))),
    ("ended after a requeue never seen",
     decision(Kind.ENDED, V.RESTART, R.NODE_FAIL, (0, 1), restart_count=1), True, 0,
     JobChange(close=True, restarts=(f"run 0 {NODE}; restart 1 of 3",
                                     "node_fail; restart 2 of 3"))),
    ("ended, no reason", decision(Kind.ENDED, V.FAIL, None, (0,)), True, 3,
     JobChange(close=True, restarts=("error; restart 4 of 3",))),
    ("ended, a cancel asked too: closed, not cancelled",
     decision(Kind.ENDED, V.FAIL, R.ERROR, cancel=True), True, 0, JobChange(close=True)),
    ("requeued, free", decision(Kind.REQUEUED, restart_count=1), True, 0, JobChange()),
    ("requeued, a run counted", decision(Kind.REQUEUED, counted=(0,), restart_count=1),
     True, 0, JobChange(restarts=(f"run 0 {NODE}; restart 1 of 3",))),
    ("requeued past the limit", decision(Kind.REQUEUED, V.FAIL, counted=(0,), cancel=True,
                                         restart_count=1),
     True, 3, JobChange(cancel=True, restarts=(f"run 0 {NODE}; restart 4 of 3",))),
    ("requeued: a counted run is a node failure or kill, whatever its number",
     decision(Kind.REQUEUED, counted=(1,), restart_count=1), True, 0,
     JobChange(restarts=(f"run 1 {NODE}; restart 1 of 3",))),
    ("requeued, no exit records", decision(Kind.REQUEUED, restart_count=1), False, 0,
     JobChange(requeued=REQUEUED)),
    ("ended, no exit records", decision(Kind.ENDED, V.COMPLETE, R.COMPLETED), False, 0,
     JobChange(close=True)),
]


@pytest.mark.parametrize(("name", "d", "wrapped", "restarts", "expected"), JOB_CHANGES,
                         ids=[row[0] for row in JOB_CHANGES])
def test_job_change(name: str, d: Decision, wrapped: bool, restarts: int,
                    expected: JobChange) -> None:
    assert job_change(d, wrapped=wrapped, restarts=restarts, max_restarts=3,
                      ref="7_0") == expected


def record(run_reason: Any) -> ExitRecord | None:
    """(run, reason) as the job row keeps its newest exit record."""
    return None if run_reason is None else ExitRecord(run_reason[1], 0, run_reason[0])


@pytest.mark.parametrize(("recorded", "note"), [
    (None, f"run 0 {NODE}; restart 1 of 3"),
    ("launch", "run 0 never started: its launch failed and Slurm held the job (the node is "
               "drained); restart 1 of 3"),
    ((0, R.HUNG), "run 0 ended hung and Slurm requeued the job; restart 1 of 3"),
    ((1, R.HUNG), f"run 0 {NODE}; restart 1 of 3"),          # another run's record
])
def test_a_requeued_run_is_named_by_its_own_record(
        recorded: tuple[int, R] | str | None, note: str) -> None:
    """The hang watchdog requeues a wrapped script's job in place: its counted run says
    ``hung`` (its exit record), not a node failure."""
    d = decision(Kind.REQUEUED, counted=(0,), restart_count=1)
    launch = recorded == "launch"
    assert job_change(d, wrapped=True, restarts=0, max_restarts=3, ref="7",
                      recorded=None if launch else record(recorded),
                      launch_failed=launch).restarts == (note,)


def facts(kind: ExperimentKind = ExperimentKind.MANAGED, target: int = 100, full: int = 100,
          restarts: int = 0, stop: StopReason | None = None, job_state: str = "FAILED",
          code: int | None = 1) -> EndFacts:
    return EndFacts(kind=kind, target_length=target, full_length=full, restarts=restarts,
                    max_restarts=2, stop_reason=stop, job_state=job_state, exit_code=code)


def fail(message: str) -> TrialChange:
    return TrialChange(needs_job=False, state=T.ERROR, reason=message,
                       note=Note("error", message), exited=TrialExit.ERRORED)


SBATCH, DETACHED = ExperimentKind.SBATCH, ExperimentKind.DETACHED
SEARCHER_STOP = TrialChange(clear_stop=True, state=T.STOPPED, reason="stopped by the searcher",
                            exited=TrialExit.STOPPED)

# (name, decision, facts, trial change)
TRIAL_CHANGES = [
    ("nothing", decision(Kind.ENDED, V.NONE, R.ERROR), facts(), None),
    ("requeued within the limit", decision(Kind.REQUEUED), facts(), None),
    ("completed", decision(Kind.ENDED, V.COMPLETE, R.COMPLETED), facts(),
     TrialChange(state=T.COMPLETED, reason="completed", exited=TrialExit.COMPLETED)),
    ("completed a rung: waits for the searcher",
     decision(Kind.ENDED, V.COMPLETE, R.COMPLETED), facts(target=25),
     TrialChange(state=T.WAITING, reason="completed", exited=TrialExit.COMPLETED)),
    ("stopped by the searcher", decision(Kind.ENDED, V.STOPPED, R.STOPPED),
     facts(stop=StopReason.STOP), SEARCHER_STOP),
    ("stopped without a request on record", decision(Kind.ENDED, V.STOPPED, R.STOPPED),
     facts(), SEARCHER_STOP),
    ("paused", decision(Kind.ENDED, V.STOPPED, R.STOPPED), facts(stop=StopReason.PAUSE),
     TrialChange(clear_stop=True, state=T.PAUSED, reason="paused")),
    ("cancelled", decision(Kind.ENDED, V.STOPPED, R.CANCELLED), facts(stop=StopReason.CANCEL),
     TrialChange(clear_stop=True, state=T.CANCELED, reason="canceled", exited=TrialExit.STOPPED)),
    ("killed", decision(Kind.ENDED, V.KILLED, R.CANCELLED), facts(),
     TrialChange(state=T.CANCELED, reason="killed")),
    ("preempted: resubmitted", decision(Kind.ENDED, V.RESUBMIT, R.PREEMPTED),
     facts(job_state="PREEMPTED"),
     TrialChange(needs_job=True, state=T.QUEUED, reason="preempted", note=Note(
         "resubmit", "job ended PREEMPTED after preempted; resubmitting (not counted)"))),
    ("failed: restarted", decision(Kind.ENDED, V.RESTART, R.ERROR, (0,)),
     facts(restarts=1), TrialChange(needs_job=True, state=T.QUEUED, reason="error", note=Note(
         "requeue", "error (job state FAILED); resubmitting from the latest checkpoint"))),
    ("failed past the limit", decision(Kind.ENDED, V.FAIL, R.ERROR, (0,)),
     facts(restarts=3), fail("error (job state FAILED, exit code 1); failed 3 times, "
                             "max_restarts=2")),
    ("lost past the limit, no reason", decision(Kind.REQUEUED, V.FAIL, None, (0,), True, 1),
     facts(restarts=3, job_state="PENDING", code=None),
     fail("run ended without a checkpointed exit (job state PENDING, exit code None); "
          "failed 3 times, max_restarts=2")),
    ("dethpc sbatch: failed once, for good", decision(Kind.ENDED, V.FAIL, R.ERROR, (0,)),
     facts(kind=SBATCH, restarts=1, code=3),
     fail(f"job ended FAILED (error, exit code 3); {NOT_RESUBMITTED[SBATCH]}")),
    ("detached: preempted, for good", decision(Kind.ENDED, V.FAIL, R.PREEMPTED),
     facts(kind=DETACHED, job_state="PREEMPTED", code=0),
     fail(f"job ended PREEMPTED (preempted, exit code 0); {NOT_RESUBMITTED[DETACHED]}")),
    ("dethpc sbatch: requeued past the limit (not an end)",
     decision(Kind.REQUEUED, V.FAIL, None, (0,), True, 1),
     facts(kind=SBATCH, restarts=3, job_state="RUNNING", code=None),
     fail("run ended without a checkpointed exit (job state RUNNING, exit code None); "
          "failed 3 times, max_restarts=2")),
]


@pytest.mark.parametrize(("name", "d", "f", "expected"), TRIAL_CHANGES,
                         ids=[row[0] for row in TRIAL_CHANGES])
def test_trial_change(name: str, d: Decision, f: EndFacts,
                      expected: TrialChange | None) -> None:
    assert trial_change(d, f) == expected


def test_every_verdict_has_a_trial_change_row() -> None:
    assert {d.verdict for _, d, _, _ in TRIAL_CHANGES} == set(Verdict)


@pytest.mark.parametrize(("raw", "reason", "restarts", "recorded", "goes_on", "release"), [
    # an expedited requeue held it after a counted end of the run that just ended
    ("REQUEUE_HOLD", "job requeued in held state", 1, (0, R.ERROR), True, True),
    ("RH", "", 1, (0, R.HUNG), True, True),
    ("REQUEUE_HOLD", "", 1, (0, R.ERROR), False, False),   # the trial ends or stops: no
    ("REQUEUE_HOLD", "", 1, (0, R.REQUEUED), True, False),  # `scontrol requeuehold`
    ("REQUEUE_HOLD", "", 1, (0, R.PREEMPTED), True, False),
    ("REQUEUE_HOLD", "", 1, None, True, False),            # no record of why: left alone
    ("REQUEUE_HOLD", "", 2, (0, R.ERROR), True, False),    # an older run's record
    ("PENDING", "", 1, (0, R.ERROR), True, False),          # not held
    ("RUNNING", "", 1, (0, R.ERROR), True, False),
    # one failed launch: the node is drained, the job starts elsewhere
    ("PENDING", "launch failed requeued held", 1, None, True, True),
    ("PENDING", "launch failed requeued held", 1, None, False, False),
    # the launch-failure limit, an administrator's hold, the user's own: never
    ("PENDING", "launch failure limit exceeded requeued held", 1, None, True, False),
    ("PENDING", "JobHoldMaxRequeue", 3, (2, R.ERROR), True, False),
    ("PENDING", "JobHeldAdmin", 1, (0, R.ERROR), True, False),
    ("PENDING", "JobHeldUser", 1, (0, R.ERROR), True, False),
])
def test_release_held(raw: str, reason: str, restarts: int, recorded: tuple[int, R] | None,
                      goes_on: bool, release: bool) -> None:
    assert release_held(raw, reason, restarts, record(recorded), goes_on=goes_on) is release
