"""``dethpc.control.reconcile.ingest_rules`` and ``skip_rules.new_reasons``: what the lines
a job writes mean, one row per case; ``ingest.Ingest`` carries them into rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from dethpc.backends.base import JobInfo, JobState
from dethpc.common.exitcodes import ExitReason as R
from dethpc.control.job_end import ExitRecord
from dethpc.control.reconcile.ingest_rules import (
    LineKind,
    free_exit_note,
    free_runs,
    improves,
    job_for_record,
    line_kind,
    parse_exit_record,
)
from dethpc.control.reconcile.skip_rules import LiveRow, new_reasons
from dethpc.store.models import TrialState


@pytest.mark.parametrize(("line", "record"), [
    ({"reason": "completed", "code": 0, "restart": 0}, ExitRecord(R.COMPLETED, 0, 0)),
    ({"reason": "preempted", "code": 0, "restart": 2, "signal": "USR1"},
     ExitRecord(R.PREEMPTED, 0, 2, "USR1")),
    ({"reason": "error", "code": 3}, ExitRecord(R.ERROR, 3, 0)),
    ({"reason": "no-such-reason", "code": 1, "restart": 1}, ExitRecord(R.ERROR, 1, 1)),
    ({}, ExitRecord(R.ERROR, 0, 0)),
    ({"reason": "stopped", "code": None, "restart": None, "signal": None},
     ExitRecord(R.STOPPED, 0, 0)),
])
def test_parse_exit_record(line: dict[str, Any], record: ExitRecord) -> None:
    assert parse_exit_record(line) == record


@pytest.mark.parametrize(("line", "kind"), [
    ({"kind": "training", "steps": 1, "metrics": {"loss": 1.0}}, LineKind.TRAINING),
    ({"kind": "validation", "steps": 5, "metrics": {"loss": 1.0}}, LineKind.VALIDATION),
    ({"kind": "checkpoint", "steps": 5, "uuid": "u1"}, LineKind.CHECKPOINT),
    ({"kind": "checkpoint", "steps": 5}, LineKind.OTHER),          # no uuid: not one
    ({"kind": "checkpoint", "steps": 5, "uuid": ""}, LineKind.OTHER),
    ({"kind": "profiler", "steps": 5}, LineKind.OTHER),
    ({"steps": 5}, LineKind.OTHER),
])
def test_line_kind(line: dict[str, Any], kind: LineKind) -> None:
    assert line_kind(line) is kind


@pytest.mark.parametrize(("value", "best", "smaller", "better"), [
    (1.0, None, True, True),      # the first validation is the best so far
    (1.0, None, False, True),
    (0.5, 1.0, True, True),
    (1.5, 1.0, True, False),
    (1.0, 1.0, True, False),      # a tie keeps the older best
    (1.5, 1.0, False, True),
    (0.5, 1.0, False, False),
    (1.0, 1.0, False, False),
])
def test_improves(value: float, best: float | None, smaller: bool, better: bool) -> None:
    assert improves(value, best, smaller_is_better=smaller) is better


@dataclass
class J:
    id: int | None
    ref: str | None


@pytest.mark.parametrize(("jobs", "ref", "chosen"), [
    ([J(1, "5_0"), J(2, "6_3")], "5_0", 0),       # its own job
    ([J(1, "5_0"), J(2, "6_3")], "6_3", 1),
    ([J(1, "5_0"), J(2, "6_3")], "", 1),          # no job named: the newest
    ([J(2, "6_3"), J(1, "5_0")], "9_9", 0),       # unknown ref: the newest
    ([J(None, None), J(3, None)], "", 1),
    ([], "5_0", None),
])
def test_job_for_record(jobs: list[J], ref: str, chosen: int | None) -> None:
    got = job_for_record(jobs, ref)
    assert got is (jobs[chosen] if chosen is not None else None)


def test_free_runs_are_this_jobs_runs_with_a_free_record() -> None:
    lines = [
        {"job": "5_0", "reason": "preempted", "restart": 0},
        {"job": "5_0", "reason": "error", "restart": 1},
        {"job": "5_0", "reason": "time_limit", "restart": 2},
        {"job": "5_0", "reason": "requeued", "restart": 3},
        {"job": "6_0", "reason": "preempted", "restart": 4},   # another job's
        {"reason": "preempted", "restart": 5},                  # no job named
        {"job": "5_0", "reason": "completed", "restart": 6},
        {"job": "5_0", "reason": "stopped", "restart": 7},
    ]
    # a completed run is never a restart to count: when Slurm ran the job once more (25.11,
    # after a preemption whose grace ran out) that run is Slurm's doing
    assert free_runs(lines, "5_0") == frozenset({0, 2, 3, 6})
    assert free_runs(lines, "7_0") == frozenset()


@pytest.mark.parametrize(("record", "note"), [
    (ExitRecord(R.PREEMPTED, 0, 0, "USR1"),
     "trial checkpointed at step 40 after USR1; requeued (not counted)"),
    (ExitRecord(R.TIME_LIMIT, 0, 1),
     "trial checkpointed at step 40 after a signal; requeued (not counted)"),
])
def test_free_exit_note(record: ExitRecord, note: str) -> None:
    assert free_exit_note(record, 40) == note


def row(job_id: int, ref: str | None, reason: str) -> LiveRow:
    return LiveRow(job_id, 10 + job_id, ref, JobState.PENDING, 0, 0, reason, "",
                   TrialState.QUEUED, 0, 0, 0, None)


def test_new_reasons_are_the_quiet_jobs_whose_reason_changed() -> None:
    rows = [row(1, "7_0", ""), row(2, "7_1", "Priority"), row(3, "7_2", "Priority"),
            row(4, None, ""), row(5, "7_4", "Resources")]
    infos = {ref: JobInfo(ref=ref, state=JobState.PENDING, reason=reason)
             for ref, reason in [("7_0", "Priority"), ("7_1", "Priority"),
                                 ("7_2", "Resources")]}
    # 7_4 was not polled: its reason is kept
    assert new_reasons(rows, infos) == [{"jid": 1, "r": "Priority"}, {"jid": 3, "r": "Resources"}]
