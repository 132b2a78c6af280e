"""What one poll and one job-end decision do to a job and its trial: pure rules.

Owns: ``observe`` (what a poll of a live job changes on its row and its open trial:
the unknown-poll count, the pending reason, the state and nodes, RUNNING or back to
QUEUED), ``job_change`` (what ``job_end.judge``'s ``Decision`` does to the job: closed
or cancelled, the events of the runs it counts, a Slurm requeue of a job without exit
records) and ``trial_change`` (what the decision's ``Verdict`` does to the trial:
completed or waiting, stopped, killed, resubmitted, restarted, failed -- each with its
exit reason, event and searcher exit; a trial whose training code reported an early
exit and then ended well is COMPLETED, never WAITING, and the searcher is told the
early exit: ``early_exit_change``). ``judge`` (``dethpc.control.job_end``) decides
the verdict; these rules spell out its consequences.
Must not: touch rows or files, or call the searcher or a backend (``job_ends.JobEnds``
applies them).
"""

from __future__ import annotations

from dataclasses import dataclass

from dethpc.backends.base import JobInfo, JobState
from dethpc.backends.slurm_holds import HoldKind, hold_of
from dethpc.common.exitcodes import TrialExit
from dethpc.common.kinds import EventKind, ExperimentKind
from dethpc.control.job_end import Decision, ExitRecord, Kind, Verdict
from dethpc.control.reconcile.changes import Note, TrialChange
from dethpc.control.reconcile.stop_rules import stopped_change
from dethpc.store.models import EarlyExit, StopReason, TrialState

#: why a failed trial of a kind the daemon does not submit gets no new job
NOT_RESUBMITTED = {
    ExperimentKind.SBATCH: "jobs of `dethpc sbatch` are not resubmitted (only Slurm's own "
                           "requeue runs them again)",
    ExperimentKind.DETACHED: "a job dethpc did not submit is not resubmitted (only Slurm's "
                             "own requeue runs it again)",
}


# ---------------------------------------------------------------------- a poll
@dataclass(frozen=True)
class JobSeen:
    """What the store holds of a live job before this poll."""

    state: JobState
    unknown_ticks: int
    reason: str
    nodes: str


@dataclass(frozen=True)
class Observation:
    """What a poll changes on a job's row and its trial."""

    unknown_ticks: int
    #: the reason to store (None: keep; a poll that lost the job says nothing of why)
    reason: str | None
    #: the state or nodes changed: store ``info``'s state, raw state and ``nodes``
    moved: bool
    nodes: str
    #: the open trial's new state (None: unchanged)
    trial_state: TrialState | None


def observe(seen: JobSeen, info: JobInfo, trial: TrialState | None) -> Observation:
    """``trial``: the state of the job's trial (None: not loaded)."""
    unknown = seen.unknown_ticks + 1 if info.state == JobState.UNKNOWN else 0
    reason = (info.reason if info.state != JobState.UNKNOWN and seen.reason != info.reason
              else None)
    moved = seen.state != info.state or seen.nodes != info.nodes
    target = None
    if moved and trial is not None and not trial.is_terminal:
        if info.state == JobState.RUNNING:
            target = TrialState.RUNNING
        elif info.state == JobState.PENDING and trial == TrialState.RUNNING:
            target = TrialState.QUEUED
    return Observation(unknown_ticks=unknown, reason=reason, moved=moved,
                       nodes=info.nodes or seen.nodes,
                       trial_state=target if target != trial else None)


# ---------------------------------------------------------------------- a job's end
@dataclass(frozen=True)
class JobChange:
    """What a decision does to the job (``Kind.WAIT``: nothing)."""

    #: the job left the queue: record its end and close it
    close: bool = False
    #: the job is still live but must be cancelled (its trial failed)
    cancel: bool = False
    #: one "restart" event per counted run, in order (each counts against max_restarts)
    restarts: tuple[str, ...] = ()
    #: Slurm requeued a job that writes no exit records: the run counts, not as a restart
    requeued: str | None = None


def job_change(d: Decision, *, wrapped: bool, restarts: int, max_restarts: int,
               ref: str, recorded: ExitRecord | None = None,
               launch_failed: bool = False) -> JobChange:
    """``restarts``: counted before this decision; ``wrapped``: the job writes exit
    records (``ExperimentKind.wrapped``); ``ref``: the job's, for the events;
    ``recorded``: the job's newest exit record (a requeued run that recorded why it
    ended, ``hung`` say, is named by it); ``launch_failed``: Slurm
    holds the requeued job after its last launch failed (the run never started)."""
    notes = []
    for i, run in enumerate(d.counted_runs):
        why = (f"run {run} ended without a checkpointed exit (node failure or kill)"
               if d.kind == Kind.REQUEUED or run != d.restart_count
               else f"{d.reason.value if d.reason else 'error'}")
        if d.kind == Kind.REQUEUED and recorded is not None and recorded.run == run:
            why = f"run {run} ended {recorded.reason.value} and Slurm requeued the job"
        elif d.kind == Kind.REQUEUED and launch_failed and run == d.restart_count - 1:
            why = (f"run {run} never started: its launch failed and Slurm held the job "
                   "(the node is drained)")
        notes.append(f"{why}; restart {restarts + i + 1} of {max_restarts}")
    requeued = None
    if d.kind == Kind.REQUEUED and not wrapped:
        requeued = (f"job {ref} was requeued by Slurm (run {d.restart_count}); not "
                    "counted: a job dethpc did not submit leaves no exit record, its own "
                    "--requeue decided")
    return JobChange(close=d.kind == Kind.ENDED, cancel=d.kind != Kind.ENDED and d.cancel,
                     restarts=tuple(notes), requeued=requeued)


#: raw Slurm states of a job requeued and held (``--requeue=expedite`` after a run that
#: exited non-zero; also ``scontrol requeuehold``)
REQUEUE_HELD = frozenset({"REQUEUE_HOLD", "RH"})


def release_held(raw_state: str, reason: str, restart_count: int,
                 recorded: ExitRecord | None, *, goes_on: bool) -> bool:
    """Release a held job whose trial ``goes_on`` (not ended, not stopping, restarts
    left: the reconcile's own decision), for two holds that Slurm placed mechanically:

    * one failed launch ("launch failed requeued held", a prolog error): Slurm drained
      the node, so the released job starts on another one (the run never started: it
      counts as a restart, which bounds a cluster whose every node fails);
    * an expedited requeue (``REQUEUE_HOLD``) after a run that exited non-zero (Slurm
      25.11's ``batch_requeue_fini``: "holding expedited requeue ... as no epilogs
      failed"): dethpc asked for that requeue, so it finishes it when the run that just
      ended (``restart_count - 1``) recorded a counted end (an error, a hang). A free end
      (``scontrol requeuehold`` of a running job, which the run records as
      ``requeued``) or no record is someone's hold.

    Never an administrator's hold, the user's own, or the launch-failure limit's."""
    if not goes_on:
        return False
    hold = hold_of(reason)
    if hold is not None and hold.kind is HoldKind.LAUNCH_FAILED:
        return True
    if raw_state not in REQUEUE_HELD or recorded is None:
        return False
    return recorded.run == restart_count - 1 and not recorded.free


@dataclass(frozen=True)
class EndFacts:
    """What a verdict's change to the trial depends on beyond the decision."""

    kind: ExperimentKind
    #: the trial's target length and the searcher's full length (shorter: it waits)
    target_length: int
    full_length: int
    #: restarts counted, this decision's included, and the limit
    restarts: int
    max_restarts: int
    #: why a stop was asked of the trial (None: the searcher's stop)
    stop_reason: StopReason | None
    #: the job's state as the poll said (the backend's own word when it has one)
    job_state: str
    exit_code: int | None
    #: the early exit the training code reported (None: none)
    early_exit: EarlyExit | None = None


def trial_change(d: Decision, f: EndFacts) -> TrialChange | None:
    """The trial's change for ``d``'s verdict (None: ``Verdict.NONE``, nothing)."""
    reason = d.reason.value if d.reason else ""
    if d.verdict == Verdict.COMPLETE and f.early_exit is not None:
        return early_exit_change(f.early_exit)
    if d.verdict == Verdict.COMPLETE:
        waiting = f.target_length < f.full_length
        return TrialChange(state=TrialState.WAITING if waiting else TrialState.COMPLETED,
                           reason=reason, exited=TrialExit.COMPLETED)
    if d.verdict == Verdict.STOPPED:
        return stopped_change(f.stop_reason)
    if d.verdict == Verdict.KILLED:
        return TrialChange(state=TrialState.CANCELED, reason="killed")
    if d.verdict == Verdict.RESUBMIT:
        return TrialChange(needs_job=True, state=TrialState.QUEUED, reason=reason,
                           note=Note(EventKind.RESUBMIT, f"job ended {f.job_state} after {reason}; "
                                     "resubmitting (not counted)"))
    if d.verdict == Verdict.RESTART:
        return TrialChange(needs_job=True, state=TrialState.QUEUED, reason=reason,
                           note=Note(EventKind.REQUEUE, f"{reason} (job state {f.job_state}); "
                                     "resubmitting from the latest checkpoint"))
    if d.verdict == Verdict.FAIL and d.kind == Kind.ENDED and not f.kind.daemon_submits:
        return failed(f"job ended {f.job_state} ({reason}, exit code {f.exit_code}); "
                      f"{NOT_RESUBMITTED[f.kind]}")
    if d.verdict == Verdict.FAIL:
        what = reason or "run ended without a checkpointed exit"
        return failed(f"{what} (job state {f.job_state}, exit code {f.exit_code}); failed "
                      f"{f.restarts} times, max_restarts={f.max_restarts}")
    return None


#: the event of a trial that ended after reporting an early exit
EARLY_EXIT_NOTES = {
    EarlyExit.INVALID_HP: "the training code raised det.InvalidHP: the searcher drops these "
                          "hyperparameters",
    EarlyExit.USER_REQUESTED_STOP: "the training code stopped the trial before its length "
                                   "(user_requested_stop)",
}


def early_exit_change(why: EarlyExit) -> TrialChange:
    """A trial that ended well after its training code reported ``why``: COMPLETED, as
    Determined's trial ("trial exited early ..."), even when a promotion would have made
    it wait (it cannot go on), and the searcher told ``why``."""
    return TrialChange(needs_job=False, state=TrialState.COMPLETED, reason=why.value,
                       note=Note(EventKind.EARLY_EXIT, EARLY_EXIT_NOTES[why]),
                       exited=TrialExit(why.value))


def failed(message: str) -> TrialChange:
    """A trial that failed for good: no new job, ERROR with ``message`` as its reason and
    an event, and the searcher told it errored."""
    return TrialChange(needs_job=False, state=TrialState.ERROR, reason=message,
                       note=Note(EventKind.ERROR, message), exited=TrialExit.ERRORED)
