"""What a line of a trial's files means: pure rules over the records a job writes.

Owns: ``parse_exit_record`` (an ``exits.jsonl`` line; an unknown reason reads as an
error), ``line_kind`` (what a ``metrics.jsonl`` line is: a metric row, a validation,
a checkpoint, or nothing dethpc keeps), ``improves`` (a validation beats the trial's
best), ``job_for_record`` (the job an exit record belongs to), ``free_runs`` (the runs
of one job that ended with a free record) and ``free_exit_note`` (the event of one).
Must not: read files, touch the store or feed the searcher (``ingest.Ingest`` does).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from dethpc.common.exitcodes import ExitReason
from dethpc.control.job_end import ExitRecord


def parse_exit_record(rec: dict[str, Any]) -> ExitRecord:
    """An ``exits.jsonl`` line; a reason this dethpc does not know reads as an error."""
    try:
        reason = ExitReason(str(rec.get("reason", "")))
    except ValueError:
        reason = ExitReason.ERROR
    return ExitRecord(reason=reason, code=int(rec.get("code", 0) or 0),
                      run=int(rec.get("restart", 0) or 0), signal=str(rec.get("signal") or ""))


class LineKind(StrEnum):
    """What one ``metrics.jsonl`` line is to the daemon."""

    TRAINING = "training"        # a metric row
    VALIDATION = "validation"    # a metric row, and a validation the searcher is told of
    CHECKPOINT = "checkpoint"    # a checkpoint row (a line without a uuid is not one)
    OTHER = "other"              # kept by nothing (a kind this dethpc does not know)


def line_kind(rec: dict[str, Any]) -> LineKind:
    kind = rec.get("kind")
    if kind == "training":
        return LineKind.TRAINING
    if kind == "validation":
        return LineKind.VALIDATION
    if kind == "checkpoint" and rec.get("uuid"):
        return LineKind.CHECKPOINT
    return LineKind.OTHER


def improves(value: float, best: float | None, *, smaller_is_better: bool) -> bool:
    """``value`` is the trial's new best validation (the first one always is)."""
    return best is None or (value < best if smaller_is_better else value > best)


class HasRef(Protocol):
    @property
    def id(self) -> int | None: ...

    @property
    def ref(self) -> str | None: ...


J = TypeVar("J", bound=HasRef)


def job_for_record(jobs: Sequence[J], ref: str) -> J | None:
    """The job of ``jobs`` (one trial's) an exit record naming ``ref`` belongs to: the one
    with that ref, else the newest (a record without a ``job`` field, or one written
    under a ref the store never knew)."""
    job = next((j for j in jobs if j.ref == ref), None)
    if job is None:
        job = max(jobs, key=lambda j: j.id or 0, default=None)
    return job


def free_runs(records: Iterable[dict[str, Any]], ref: str) -> frozenset[int]:
    """Runs of job ``ref`` that ended with a free exit record (``exits.jsonl`` read from
    its start: the job row keeps only the last record, and one tick may see several
    runs end)."""
    return frozenset(rec.run for raw, rec in ((r, parse_exit_record(r)) for r in records)
                     if str(raw.get("job", "")) == ref and rec.free)


def free_exit_note(rec: ExitRecord, steps: int) -> str:
    """The event of a free exit record: the trial checkpointed and is requeued."""
    return (f"trial checkpointed at step {steps} after {rec.signal or 'a signal'}; "
            "requeued (not counted)")
