"""Why a job ended, and what that means for its trial: one pure function.

Owns: ``judge`` — from what the store knows of a job and its trial
(``JobFacts``, ``TrialFacts``) and what one poll of the backend says of the job
(``JobInfo``) to a ``Decision``: wait, a requeue seen (which of the ended runs
count against ``max_restarts``), or the job's end (its ``ExitReason`` and the
trial's ``Verdict``). docs/architecture.md ("Why a job ended") is this table.
Must not: read files, touch the store or call a backend; the reconciler
gathers the facts and carries the decision out.

The rules, in order:

0. A poll's restart count lower than the store's, or than the run of the job's
   last exit record, is a poll that does not know it (``known_runs``).
1. Not polled, pending, running, or COMPLETING (the old run's batch shell may
   still be writing its exit record): wait.
2. Slurm requeued the job (its restart count grew): each ended run without a
   *free* exit record (preempted, time_limit, requeued) for that run counts
   as a restart (a node failure or kill). Past ``max_restarts`` the trial
   fails and its job is cancelled.
3. The job left the queue (a terminal state; UNKNOWN only after
   ``UNKNOWN_TICKS`` polls in a row): the exit record of the *last* run wins;
   without one the state says why. A record with a free reason, or Slurm's
   PREEMPTED (PreemptMode=CANCEL), resubmits without counting; anything else
   without a completed/stopped record counts (a TIMEOUT without a record too:
   a trial that ignores the walltime signal would otherwise loop forever; and an
   ``error`` or ``cancelled`` record on a TIMEOUT job reads as ``time_limit``, counted:
   a script that ignored the signal was killed at the limit).

Two traits of the experiment's kind (``ExperimentKind``) bend the rules:

* ``TrialFacts.resubmittable`` False (``dethpc sbatch`` and detached jobs: nobody
  submits a second job): a resubmit or counted restart becomes the trial's failure.
  Slurm's own requeues of the live job are judged as above.
* ``JobFacts.wrapped`` False (a detached job: no exit records at all): Slurm's
  COMPLETED is a success, and a requeue is not counted (dethpc cannot tell a
  preemption from a failure there, and it did not submit the job: the user's
  ``--requeue`` decided).

Three modules, three questions: this one (the daemon, pure) judges a *job* from the
store and a poll; ``dethpc.control.reconcile.job_ends`` (the daemon) gathers the facts
for it and carries its ``Decision`` out on the rows; ``dethpc.launch.run_end`` (inside
the job, at the end of each run) decides whether the job requeues itself and writes the
run's exit record (its ``RunDecision``, from ``RunFacts`` and ``SlurmJobFacts``), which
this module later reads as an ``ExitRecord``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from dethpc.backends.base import JobInfo, JobState
from dethpc.common.exitcodes import ExitReason

#: polls in a row a job may be unknown to the backend before it is declared lost
UNKNOWN_TICKS = 3
#: exit records after which the job requeues (or is resubmitted) without counting
FREE_REASONS = frozenset({ExitReason.PREEMPTED, ExitReason.TIME_LIMIT, ExitReason.REQUEUED})
#: raw Slurm states of a job whose processes are still being torn down
COMPLETING = frozenset({"COMPLETING", "CG"})

#: the reason a job ended when its last run left no exit record
_STATE_REASON: dict[JobState, ExitReason] = {
    JobState.COMPLETED: ExitReason.ERROR,   # exit 0 without a record: the wrapper was bypassed
    JobState.FAILED: ExitReason.ERROR,
    JobState.OUT_OF_MEMORY: ExitReason.ERROR,
    JobState.TIMEOUT: ExitReason.TIME_LIMIT,
    JobState.CANCELLED: ExitReason.CANCELLED,
    JobState.NODE_FAIL: ExitReason.NODE_FAIL,
    JobState.UNKNOWN: ExitReason.NODE_FAIL,
    JobState.PREEMPTED: ExitReason.PREEMPTED,
}


@dataclass(frozen=True)
class ExitRecord:
    """One line of a trial's ``exits.jsonl``, written by the job wrapper per run."""

    reason: ExitReason
    code: int
    run: int              # the run's SLURM_RESTART_COUNT
    signal: str = ""
    #: the run's nodes (Slurm; ``dethpc.launch.run_end.run_nodes``), () unknown
    nodes: tuple[str, ...] = ()

    @property
    def free(self) -> bool:
        return self.reason in FREE_REASONS


@dataclass(frozen=True)
class JobFacts:
    """What the store knows of one live job."""

    restart_count: int                 # runs already judged (the last count seen)
    unknown_ticks: int                 # polls in a row, this one included, that knew nothing
    last_record: ExitRecord | None     # the newest exit record of this job
    free_runs: frozenset[int] = frozenset()   # runs of this job with a free record
    #: a dethpc job shell writes an exit record per run (False: a detached job)
    wrapped: bool = True


@dataclass(frozen=True)
class TrialFacts:
    terminal: bool                     # the trial has already ended
    stop_requested: bool               # a stop/pause/cancel file was written
    killing: bool                      # the experiment is being killed
    restarts: int                      # counted so far
    max_restarts: int
    #: the daemon submits a new job when this one ends (False: ``dethpc sbatch``, detached)
    resubmittable: bool = True


class Kind(StrEnum):
    WAIT = "wait"            # nothing to decide this tick
    REQUEUED = "requeued"    # the job was requeued by Slurm and stays live
    ENDED = "ended"          # the job left the queue: close it


class Verdict(StrEnum):
    """What the trial does about it."""

    NONE = "none"            # nothing (trial already ended, or a requeue within limits)
    COMPLETE = "complete"    # reached its target length
    STOPPED = "stopped"      # stopped by the searcher, paused or cancelled on request
    KILLED = "killed"        # the experiment is being killed
    RESUBMIT = "resubmit"    # preempted / time limit: a new job, not counted
    RESTART = "restart"      # failed, counted: a new job from the latest checkpoint
    FAIL = "fail"            # failed past max_restarts


@dataclass(frozen=True)
class Decision:
    kind: Kind
    verdict: Verdict = Verdict.NONE
    #: why the job ended (ENDED only)
    reason: ExitReason | None = None
    #: runs that ended without a free record and count against max_restarts
    counted_runs: tuple[int, ...] = ()
    #: the job is still queued or running but must be cancelled (failed past the limit)
    cancel: bool = False
    #: restart count seen in this poll (REQUEUED: store it)
    restart_count: int = 0

    @property
    def counted(self) -> int:
        return len(self.counted_runs)


WAIT = Decision(Kind.WAIT)


def nothing_to_judge(restart_count: int, info: JobInfo | None) -> bool:
    """``judge`` answers WAIT whatever else it is told: no news of the job, or a job
    still queued or running that Slurm has not requeued since ``restart_count``. A
    tick of thousands of pending jobs skips gathering their facts."""
    return info is None or (not info.state.is_terminal
                            and info.restart_count <= restart_count)


def judge(job: JobFacts, trial: TrialFacts, info: JobInfo | None) -> Decision:
    """The decision for one job this tick (see the module docstring for the rules)."""
    if info is None or info.raw_state in COMPLETING:
        return WAIT
    info = known_runs(job, info)
    if info.restart_count > job.restart_count and not info.state.is_terminal:
        return _requeued(job, trial, info)
    if not info.state.is_terminal:
        return WAIT
    if info.state == JobState.UNKNOWN and job.unknown_ticks < UNKNOWN_TICKS:
        return WAIT
    return _ended(job, trial, info)


def known_runs(job: JobFacts, info: JobInfo) -> JobInfo:
    """``info`` with a restart count no lower than what the store knows: Slurm's count
    never goes down, and an exit record names the run that wrote it. A poll that says
    less does not know it (``sacct`` before Slurm 23.02 has no ``Restarts`` field: a
    requeued job whose end is seen only after it left ``squeue`` reads 0, and its last
    run's record would not match)."""
    runs = max(job.restart_count, job.last_record.run if job.last_record else 0)
    return info if info.restart_count >= runs else replace(info, restart_count=runs)


def runs_ended_since(job: JobFacts, info: JobInfo | None) -> bool:
    """Runs of the job ended since the store's count, by what the poll and the job's
    newest exit record say together (``known_runs``): then ``judge`` needs the job's
    ``free_runs``, read from ``exits.jsonl``. A poll alone can say less (22.05's sacct
    has no restart count): a job requeued by its own script and completed while the
    daemon was down would have its free requeue counted as a restart."""
    return info is not None and known_runs(job, info).restart_count > job.restart_count


def _requeued(job: JobFacts, trial: TrialFacts, info: JobInfo) -> Decision:
    counted = _counted_earlier(job, info)
    over = trial.restarts + len(counted) > trial.max_restarts
    fail = over and not trial.terminal
    return Decision(Kind.REQUEUED, Verdict.FAIL if fail else Verdict.NONE,
                    counted_runs=counted, cancel=fail, restart_count=info.restart_count)


def _counted_earlier(job: JobFacts, info: JobInfo) -> tuple[int, ...]:
    """Runs before the current one that count: those without a free record (none for
    a job without records: its requeues were Slurm's, on the user's ``--requeue``)."""
    if not job.wrapped:
        return ()
    return tuple(run for run in range(job.restart_count, info.restart_count)
                 if run not in job.free_runs)


def last_run(job: JobFacts, info: JobInfo) -> tuple[ExitReason, bool]:
    """Why the last run ended and whether that end is free (not counted): its exit
    record when there is one, else what the state says."""
    rec = job.last_record
    if rec is not None and rec.run == info.restart_count:
        if rec.reason in (ExitReason.ERROR, ExitReason.CANCELLED) \
                and info.state == JobState.TIMEOUT:
            return ExitReason.TIME_LIMIT, False   # ignored the signal, killed at the limit
        return rec.reason, rec.free
    if not job.wrapped and info.state == JobState.COMPLETED:
        return ExitReason.COMPLETED, False
    return _STATE_REASON.get(info.state, ExitReason.ERROR), info.state == JobState.PREEMPTED


def _ended(job: JobFacts, trial: TrialFacts, info: JobInfo) -> Decision:
    # a requeue the tick never saw while the job was live (requeued, then ended)
    earlier = _counted_earlier(job, info)
    reason, last_run_free = last_run(job, info)
    ended = Decision(Kind.ENDED, reason=reason, counted_runs=earlier,
                     restart_count=max(info.restart_count, job.restart_count))
    if trial.terminal:
        return ended
    if reason == ExitReason.COMPLETED:
        return _with(ended, Verdict.COMPLETE)
    if reason == ExitReason.STOPPED or trial.stop_requested:
        return _with(ended, Verdict.STOPPED)
    if trial.killing:
        return _with(ended, Verdict.KILLED)
    if last_run_free:
        over = trial.restarts + len(earlier) > trial.max_restarts
        return _with(ended, Verdict.FAIL if over or not trial.resubmittable
                     else Verdict.RESUBMIT)
    counted = (*earlier, info.restart_count)
    over = trial.restarts + len(counted) > trial.max_restarts
    verdict = Verdict.FAIL if over or not trial.resubmittable else Verdict.RESTART
    return Decision(Kind.ENDED, verdict, reason=reason, counted_runs=counted,
                    restart_count=ended.restart_count)


def _with(d: Decision, verdict: Verdict) -> Decision:
    return Decision(d.kind, verdict, reason=d.reason, counted_runs=d.counted_runs,
                    restart_count=d.restart_count)
