"""``dethpc.control.job_end.judge``: why a job ended and what its trial does, one row per case.

Each row: the job's facts in the store, the trial's, what one poll says, and the
decision expected (kind, verdict, exit reason, runs counted against max_restarts,
cancel). docs/architecture.md ("Why a job ended") is this table in words.
"""

from __future__ import annotations

import pytest

from dethpc.backends.base import JobInfo, JobState
from dethpc.common.exitcodes import ExitReason as R
from dethpc.control.job_end import (
    UNKNOWN_TICKS,
    ExitRecord,
    JobFacts,
    Kind,
    TrialFacts,
    Verdict,
    judge,
)

S = JobState
V = Verdict


def rec(reason: R, run: int = 0, code: int = 0) -> ExitRecord:
    return ExitRecord(reason=reason, code=code, run=run)


def info(state: S, raw: str = "", restarts: int = 0, code: int | None = None) -> JobInfo:
    return JobInfo(ref="7_0", state=state, raw_state=raw or state.value.upper(),
                   exit_code=code, restart_count=restarts)


def job(restart_count: int = 0, record: ExitRecord | None = None, unknown: int = 0,
        free: tuple[int, ...] = (), wrapped: bool = True) -> JobFacts:
    return JobFacts(restart_count=restart_count, unknown_ticks=unknown, last_record=record,
                    free_runs=frozenset(free), wrapped=wrapped)


def trial(terminal: bool = False, stop: bool = False, killing: bool = False,
          restarts: int = 0, max_restarts: int = 5, resubmittable: bool = True) -> TrialFacts:
    return TrialFacts(terminal=terminal, stop_requested=stop, killing=killing,
                      restarts=restarts, max_restarts=max_restarts,
                      resubmittable=resubmittable)


#: a trial of `dethpc sbatch` or a detached job: nobody submits a second job
ONCE = {"resubmittable": False}
#: a detached job: no exit records
BARE = {"wrapped": False}


# (name, job facts, trial facts, poll, kind, verdict, reason, counted runs, cancel)
ROWS = [
    # --- nothing to decide yet
    ("not polled", job(), trial(), None, Kind.WAIT, V.NONE, None, (), False),
    ("pending", job(), trial(), info(S.PENDING), Kind.WAIT, V.NONE, None, (), False),
    ("running", job(), trial(), info(S.RUNNING), Kind.WAIT, V.NONE, None, (), False),
    ("suspended", job(), trial(), info(S.SUSPENDED), Kind.WAIT, V.NONE, None, (), False),
    ("COMPLETING after a requeue: wait for the old run's record", job(), trial(),
     info(S.RUNNING, raw="COMPLETING", restarts=1), Kind.WAIT, V.NONE, None, (), False),
    ("CG (short form) of a finished job", job(record=rec(R.COMPLETED)), trial(),
     info(S.RUNNING, raw="CG"), Kind.WAIT, V.NONE, None, (), False),
    ("unknown for 1 tick", job(unknown=1), trial(), info(S.UNKNOWN), Kind.WAIT, V.NONE,
     None, (), False),
    (f"unknown for {UNKNOWN_TICKS - 1} ticks", job(unknown=UNKNOWN_TICKS - 1), trial(),
     info(S.UNKNOWN), Kind.WAIT, V.NONE, None, (), False),
    # --- records decide
    ("completed record", job(record=rec(R.COMPLETED)), trial(), info(S.COMPLETED),
     Kind.ENDED, V.COMPLETE, R.COMPLETED, (), False),
    ("stopped record", job(record=rec(R.STOPPED, code=81)), trial(stop=True),
     info(S.COMPLETED), Kind.ENDED, V.STOPPED, R.STOPPED, (), False),
    ("stop requested, job cancelled after the grace without a record", job(),
     trial(stop=True), info(S.CANCELLED), Kind.ENDED, V.STOPPED, R.CANCELLED, (), False),
    ("preempted record, job ended (local backend)", job(record=rec(R.PREEMPTED)), trial(),
     info(S.COMPLETED), Kind.ENDED, V.RESUBMIT, R.PREEMPTED, (), False),
    ("time_limit record, TIMEOUT", job(record=rec(R.TIME_LIMIT)), trial(), info(S.TIMEOUT),
     Kind.ENDED, V.RESUBMIT, R.TIME_LIMIT, (), False),
    ("requeued record (scontrol requeue), job ended", job(record=rec(R.REQUEUED)), trial(),
     info(S.CANCELLED), Kind.ENDED, V.RESUBMIT, R.REQUEUED, (), False),
    ("error record", job(record=rec(R.ERROR, code=1)), trial(), info(S.FAILED, code=1),
     Kind.ENDED, V.RESTART, R.ERROR, (0,), False),
    ("error record, last restart allowed", job(record=rec(R.ERROR)), trial(restarts=4),
     info(S.FAILED), Kind.ENDED, V.RESTART, R.ERROR, (0,), False),
    ("error record past max_restarts", job(record=rec(R.ERROR)), trial(restarts=5),
     info(S.FAILED), Kind.ENDED, V.FAIL, R.ERROR, (0,), False),
    ("max_restarts 0: first error fails", job(record=rec(R.ERROR)),
     trial(max_restarts=0), info(S.FAILED), Kind.ENDED, V.FAIL, R.ERROR, (0,), False),
    # --- a record of an earlier run does not speak for the last run
    ("stale preempted record (run 0) and run 1 failed", job(1, rec(R.PREEMPTED, run=0)),
     trial(), info(S.FAILED, restarts=1), Kind.ENDED, V.RESTART, R.ERROR, (1,), False),
    # --- no record: the state says why
    ("NODE_FAIL without a record", job(), trial(), info(S.NODE_FAIL), Kind.ENDED,
     V.RESTART, R.NODE_FAIL, (0,), False),
    ("NODE_FAIL with a preempted record of that run (checkpointed before the node died)",
     job(record=rec(R.PREEMPTED)), trial(), info(S.NODE_FAIL), Kind.ENDED, V.RESUBMIT,
     R.PREEMPTED, (), False),
    ("NODE_FAIL with an error record", job(record=rec(R.ERROR, code=137)), trial(),
     info(S.NODE_FAIL), Kind.ENDED, V.RESTART, R.ERROR, (0,), False),
    ("TIMEOUT without a record counts (ignored the walltime signal)", job(), trial(),
     info(S.TIMEOUT), Kind.ENDED, V.RESTART, R.TIME_LIMIT, (0,), False),
    ("TIMEOUT without a record past max_restarts", job(), trial(restarts=5),
     info(S.TIMEOUT), Kind.ENDED, V.FAIL, R.TIME_LIMIT, (0,), False),
    ("FAILED without a record", job(), trial(), info(S.FAILED, code=2), Kind.ENDED,
     V.RESTART, R.ERROR, (0,), False),
    ("OUT_OF_MEMORY", job(), trial(), info(S.OUT_OF_MEMORY), Kind.ENDED, V.RESTART,
     R.ERROR, (0,), False),
    ("exit 0 without a record (wrapper bypassed) is not success", job(), trial(),
     info(S.COMPLETED), Kind.ENDED, V.RESTART, R.ERROR, (0,), False),
    ("scancel from outside counts", job(), trial(), info(S.CANCELLED), Kind.ENDED,
     V.RESTART, R.CANCELLED, (0,), False),
    ("PREEMPTED (PreemptMode=CANCEL) without a record is free", job(), trial(),
     info(S.PREEMPTED), Kind.ENDED, V.RESUBMIT, R.PREEMPTED, (), False),
    (f"unknown for {UNKNOWN_TICKS} ticks: lost", job(unknown=UNKNOWN_TICKS), trial(),
     info(S.UNKNOWN), Kind.ENDED, V.RESTART, R.NODE_FAIL, (0,), False),
    (f"unknown for {UNKNOWN_TICKS} ticks with a completed record", job(
        record=rec(R.COMPLETED), unknown=UNKNOWN_TICKS), trial(), info(S.UNKNOWN),
     Kind.ENDED, V.COMPLETE, R.COMPLETED, (), False),
    # --- the experiment and the trial
    ("killed experiment", job(), trial(killing=True), info(S.CANCELLED), Kind.ENDED,
     V.KILLED, R.CANCELLED, (), False),
    ("killed experiment, but the run completed first", job(record=rec(R.COMPLETED)),
     trial(killing=True), info(S.COMPLETED), Kind.ENDED, V.COMPLETE, R.COMPLETED, (), False),
    ("trial already terminal: just close the job", job(), trial(terminal=True),
     info(S.FAILED), Kind.ENDED, V.NONE, R.ERROR, (), False),
    # --- requeues seen while the job is live (same id, SLURM_RESTART_COUNT+1)
    ("requeued after a preemption: free", job(free=(0,)), trial(),
     info(S.PENDING, restarts=1), Kind.REQUEUED, V.NONE, None, (), False),
    ("requeued, the run left no record: node failure or kill", job(), trial(),
     info(S.PENDING, restarts=1), Kind.REQUEUED, V.NONE, None, (0,), False),
    ("NODE_FAIL then requeued by Slurm, running again", job(), trial(),
     info(S.RUNNING, restarts=1), Kind.REQUEUED, V.NONE, None, (0,), False),
    ("two runs ended in one tick, one free", job(free=(1,)), trial(),
     info(S.RUNNING, restarts=2), Kind.REQUEUED, V.NONE, None, (0,), False),
    ("requeue past max_restarts: fail and cancel", job(), trial(restarts=1, max_restarts=1),
     info(S.PENDING, restarts=1), Kind.REQUEUED, V.FAIL, None, (0,), True),
    ("requeue of an already failed trial: count, no second cancel", job(),
     trial(terminal=True, restarts=2, max_restarts=1), info(S.PENDING, restarts=1),
     Kind.REQUEUED, V.NONE, None, (0,), False),
    ("requeued then ended in one tick: earlier run counted too", job(), trial(),
     info(S.FAILED, restarts=1), Kind.ENDED, V.RESTART, R.ERROR, (0, 1), False),
    ("requeued after preemption then completed in one tick", job(
        record=rec(R.COMPLETED, run=1), free=(0,)), trial(), info(S.COMPLETED, restarts=1),
     Kind.ENDED, V.COMPLETE, R.COMPLETED, (), False),
    # --- a script that ignored the time-limit signal: its shell recorded an error
    ("error record on a TIMEOUT job: time_limit, counted", job(record=rec(R.ERROR, code=143)),
     trial(), info(S.TIMEOUT), Kind.ENDED, V.RESTART, R.TIME_LIMIT, (0,), False),
    ("error record on a TIMEOUT job past max_restarts", job(record=rec(R.ERROR)),
     trial(restarts=5), info(S.TIMEOUT), Kind.ENDED, V.FAIL, R.TIME_LIMIT, (0,), False),
    # --- not resubmittable (`dethpc sbatch`, detached): the job's end is the trial's
    ("not resubmittable: error fails at once", job(record=rec(R.ERROR, code=1)),
     trial(**ONCE), info(S.FAILED, code=1), Kind.ENDED, V.FAIL, R.ERROR, (0,), False),
    ("not resubmittable: time_limit record fails (no new job), not counted",
     job(record=rec(R.TIME_LIMIT)), trial(**ONCE), info(S.TIMEOUT), Kind.ENDED, V.FAIL,
     R.TIME_LIMIT, (), False),
    ("not resubmittable: TIMEOUT with an error record", job(record=rec(R.ERROR)),
     trial(**ONCE), info(S.TIMEOUT), Kind.ENDED, V.FAIL, R.TIME_LIMIT, (0,), False),
    ("not resubmittable: TIMEOUT with a cancelled record (Slurm's TERM at the limit)",
     job(record=rec(R.CANCELLED, code=143)), trial(**ONCE), info(S.TIMEOUT), Kind.ENDED,
     V.FAIL, R.TIME_LIMIT, (0,), False),
    ("cancelled record on a TIMEOUT job: time_limit, counted",
     job(record=rec(R.CANCELLED, code=143)), trial(), info(S.TIMEOUT), Kind.ENDED,
     V.RESTART, R.TIME_LIMIT, (0,), False),
    ("not resubmittable: PREEMPTED (PreemptMode=CANCEL) fails", job(), trial(**ONCE),
     info(S.PREEMPTED), Kind.ENDED, V.FAIL, R.PREEMPTED, (), False),
    ("not resubmittable: completed record completes", job(record=rec(R.COMPLETED)),
     trial(**ONCE), info(S.COMPLETED), Kind.ENDED, V.COMPLETE, R.COMPLETED, (), False),
    ("not resubmittable: Slurm requeue after a preemption is free",
     job(free=(0,)), trial(**ONCE), info(S.PENDING, restarts=1), Kind.REQUEUED, V.NONE,
     None, (), False),
    ("not resubmittable: Slurm requeue without a record counts",
     job(), trial(**ONCE), info(S.PENDING, restarts=1), Kind.REQUEUED, V.NONE, None,
     (0,), False),
    ("not resubmittable: Slurm requeue past max_restarts fails and cancels",
     job(), trial(max_restarts=0, **ONCE), info(S.RUNNING, restarts=1), Kind.REQUEUED,
     V.FAIL, None, (0,), True),
    # --- a requeued job whose end is seen only through sacct (22.05's has no Restarts:
    # the poll reads 0): the store's count and the record's run are not forgotten
    ("requeued once, completed, seen by sacct", job(restart_count=1,
     record=rec(R.COMPLETED, run=1)), trial(restarts=1), info(S.COMPLETED), Kind.ENDED,
     V.COMPLETE, R.COMPLETED, (), False),
    ("requeued again unseen, completed, seen by sacct", job(restart_count=1,
     record=rec(R.COMPLETED, run=2)), trial(restarts=1), info(S.COMPLETED), Kind.ENDED,
     V.COMPLETE, R.COMPLETED, (1,), False),
    ("requeued once, failed without a record, seen by sacct", job(restart_count=1),
     trial(restarts=1), info(S.FAILED, code=1), Kind.ENDED, V.RESTART, R.ERROR, (1,),
     False),
    # --- a detached job (no exit records)
    ("detached: COMPLETED without a record is a success", job(**BARE), trial(**ONCE),
     info(S.COMPLETED), Kind.ENDED, V.COMPLETE, R.COMPLETED, (), False),
    ("detached: FAILED", job(**BARE), trial(max_restarts=0, **ONCE), info(S.FAILED, code=1),
     Kind.ENDED, V.FAIL, R.ERROR, (0,), False),
    ("detached: TIMEOUT", job(**BARE), trial(max_restarts=0, **ONCE), info(S.TIMEOUT),
     Kind.ENDED, V.FAIL, R.TIME_LIMIT, (0,), False),
    ("detached: requeued by Slurm (its own --requeue) is not counted", job(**BARE),
     trial(max_restarts=0, **ONCE), info(S.PENDING, restarts=1), Kind.REQUEUED, V.NONE,
     None, (), False),
    ("detached: requeued, then completed in one tick", job(**BARE),
     trial(max_restarts=0, **ONCE), info(S.COMPLETED, restarts=2), Kind.ENDED, V.COMPLETE,
     R.COMPLETED, (), False),
]


@pytest.mark.parametrize("name,jf,tf,poll,kind,verdict,reason,counted,cancel", ROWS,
                         ids=[r[0] for r in ROWS])
def test_judge(name, jf, tf, poll, kind, verdict, reason, counted, cancel) -> None:
    d = judge(jf, tf, poll)
    assert (d.kind, d.verdict, d.reason, d.counted_runs, d.cancel) == (
        kind, verdict, reason, counted, cancel), name


def test_requeue_records_the_new_restart_count() -> None:
    d = judge(job(restart_count=1), trial(), info(S.PENDING, restarts=3))
    assert d.kind == Kind.REQUEUED and d.restart_count == 3 and d.counted_runs == (1, 2)


def test_a_poll_without_the_restart_count_keeps_the_stores() -> None:
    d = judge(job(restart_count=2, record=rec(R.COMPLETED, run=2)), trial(), info(S.COMPLETED))
    assert d.restart_count == 2


def test_every_terminal_state_has_a_row() -> None:
    """A new JobState must get a row here (and a rule in _STATE_REASON)."""
    covered = {r[3].state for r in ROWS if r[3] is not None and r[4] == Kind.ENDED}
    assert {s for s in JobState if s.is_terminal} <= covered


@pytest.mark.parametrize(("name", "jf", "poll", "read"), [
    ("not polled", job(), None, False),
    ("running, as the store knows it", job(), info(S.RUNNING), False),
    ("squeue says requeued", job(), info(S.PENDING, restarts=1), True),
    # a script's own requeue, then its completed run, seen only by 22.05's sacct (no
    # restart count) after a daemon outage: the record names run 1
    ("sacct, completed run 1 recorded", job(record=rec(R.COMPLETED, run=1)),
     info(S.COMPLETED), True),
    ("sacct, nothing past the store's count", job(restart_count=1,
     record=rec(R.COMPLETED, run=1)), info(S.COMPLETED), False),
])
def test_the_free_runs_are_read_whenever_runs_ended_since_the_stores_count(
        name: str, jf: JobFacts, poll: JobInfo | None, read: bool) -> None:
    """``JobEnds`` reads ``exits.jsonl`` for the free runs exactly when judge may count
    one; before, it asked the poll alone, and a free requeue seen only through its
    completed run's record was counted (judged here with and without them)."""
    from dataclasses import replace

    from dethpc.control.job_end import runs_ended_since

    assert runs_ended_since(jf, poll) is read, name
    if name == "sacct, completed run 1 recorded":
        assert judge(jf, trial(), poll).counted_runs == (0,)          # without the read
        assert judge(replace(jf, free_runs=frozenset({0})), trial(), poll).counted_runs == ()
