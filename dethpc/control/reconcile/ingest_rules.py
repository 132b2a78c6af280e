"""What a line of a trial's files means: pure rules over the records a job writes.

Owns: ``parse_exit_record`` (an ``exits.jsonl`` line; an unknown reason reads as an
error), ``line_kind`` (what a ``metrics.jsonl`` line is: a metric row, a validation,
a checkpoint, one of the records standing for Determined's master calls -- an early
exit, metadata, an alert, a deleted checkpoint -- or nothing dethpc keeps), what each of
those records says (``early_exit_of``, ``metadata_of``, ``alert_of``: a malformed one is
a ``BadRecord`` naming what is wrong, never an exception out of the tick),
``improves`` (a validation beats the trial's
best), ``job_for_record`` (the job an exit record belongs to), ``free_runs`` (the runs
of one job that ended with a free record) and ``free_exit_note`` (the event of one).
Must not: read files, touch the store or feed the searcher (``ingest.Ingest`` does).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from dethpc.common.exitcodes import ExitReason
from dethpc.common.kinds import MetricKind
from dethpc.control.job_end import ExitRecord
from dethpc.store.models import EarlyExit


def parse_exit_record(rec: dict[str, Any]) -> ExitRecord:
    """An ``exits.jsonl`` line; a reason this dethpc does not know reads as an error."""
    try:
        reason = ExitReason(str(rec.get("reason", "")))
    except ValueError:
        reason = ExitReason.ERROR
    nodes = rec.get("nodes")
    return ExitRecord(reason=reason, code=int(rec.get("code", 0) or 0),
                      run=int(rec.get("restart", 0) or 0), signal=str(rec.get("signal") or ""),
                      nodes=tuple(str(n) for n in nodes) if isinstance(nodes, list) else ())


class LineKind(StrEnum):
    """What one ``metrics.jsonl`` line is to the daemon."""

    TRAINING = MetricKind.TRAINING.value      # a metric row
    #: a metric row, and a validation the searcher is told of
    VALIDATION = MetricKind.VALIDATION.value
    CHECKPOINT = "checkpoint"    # a checkpoint row (a line without a uuid is not one)
    # the records of Determined's master calls (docs/job-contract.md)
    EARLY_EXIT = "early_exit"    # train.report_early_exit / det.InvalidHP: the trial's
    METADATA = "metadata"        # train.set_metadata: the trial's metadata replaced
    ALERT = "alert"              # core_context.alert: an experiment event
    CHECKPOINT_DELETED = "checkpoint_deleted"  # checkpoint.delete: the row marked deleted
    OTHER = "other"              # kept by nothing (a kind this dethpc does not know)


_KINDS = {k.value: k for k in LineKind if k not in (LineKind.CHECKPOINT, LineKind.OTHER)}


def line_kind(rec: dict[str, Any]) -> LineKind:
    kind = rec.get("kind")
    if kind == "checkpoint" or kind == "checkpoint_deleted":
        if not rec.get("uuid"):
            return LineKind.OTHER
        return LineKind.CHECKPOINT if kind == "checkpoint" else LineKind.CHECKPOINT_DELETED
    return _KINDS.get(kind, LineKind.OTHER) if isinstance(kind, str) else LineKind.OTHER


@dataclass(frozen=True)
class BadRecord:
    """A record of a known kind the daemon cannot use: what is wrong with it (an event)."""

    problem: str


#: the levels ``core_context.alert`` takes (dethpc.core._train.ALERT_LEVELS)
ALERT_LEVELS = ("debug", "info", "warn", "error")


@dataclass(frozen=True)
class Alert:
    level: str
    title: str
    description: str

    def message(self) -> str:
        """The event's one line: ``[warn] title: description``."""
        text = ": ".join(p for p in (self.title, self.description) if p) or "(empty alert)"
        return f"[{self.level}] {text}"


def early_exit_of(rec: dict[str, Any]) -> EarlyExit | BadRecord:
    reason = rec.get("reason")
    try:
        return EarlyExit(str(reason))
    except ValueError:
        allowed = ", ".join(e.value for e in EarlyExit)
        return BadRecord(f"early_exit record with reason {reason!r} ignored; "
                         f"allowed: {allowed}")


def metadata_of(rec: dict[str, Any]) -> dict[str, Any] | BadRecord:
    meta = rec.get("metadata")
    if not isinstance(meta, dict):
        return BadRecord(f"metadata record ignored: its metadata is a "
                         f"{type(meta).__name__}, not a JSON object")
    return dict(meta)


def alert_of(rec: dict[str, Any]) -> Alert:
    """An alert record; a level outside ``ALERT_LEVELS`` (a newer job side) reads as
    ``info``, missing texts as empty."""
    level = rec.get("level")
    return Alert(level=level if level in ALERT_LEVELS else "info",
                 title=str(rec.get("title") or ""),
                 description=str(rec.get("description") or ""))


@dataclass(frozen=True)
class Kept:
    """A checkpoint of the trial still offered: what picks the trial's latest."""

    uuid: str
    steps: int
    created: float


def latest_kept(kept: Iterable[Kept]) -> str | None:
    """The trial's latest checkpoint among those still offered (most steps, then the
    newest), as ``dethpc.core`` resumes from; None when none is left."""
    best = max(kept, key=lambda k: (k.steps, k.created), default=None)
    return None if best is None else best.uuid


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
    """Runs of job ``ref`` whose end counts against no restart: those with a free exit
    record, and those that completed (a completed run that Slurm requeued once more is
    Slurm's doing: 25.11 turns the completion after a preemption whose grace ran out into
    a requeue). ``exits.jsonl`` is read from its start: the job row keeps only the last
    record, and one tick may see several runs end."""
    return frozenset(rec.run for raw, rec in ((r, parse_exit_record(r)) for r in records)
                     if str(raw.get("job", "")) == ref
                     and (rec.free or rec.reason is ExitReason.COMPLETED))


def free_exit_note(rec: ExitRecord, steps: int) -> str:
    """The event of a free exit record: the trial checkpointed and is requeued."""
    return (f"trial checkpointed at step {steps} after {rec.signal or 'a signal'}; "
            "requeued (not counted)")
