"""Reporting metrics: the writer of ``metrics.jsonl`` and the train sub-context.

Owns: ``MetricsWriter`` (one JSON object per line, flushed and fsync'd per
line, never invalid JSON), ``TrainContext`` (rank 0 writes, other ranks no-op;
training/validation/other-group metrics, progress)
and ``DummyTrainContext`` (logs only, used off-cluster).
Must not: import torch (tensors are converted through ``.item()``/``.tolist()``),
aggregate metrics across ranks (the caller does), or read the file back.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dethpc.common.errors import DethpcError
from dethpc.common.jsonlines import ends_mid_line
from dethpc.core._distributed import DistributedContext

log = logging.getLogger(__name__)


def _numel(value: Any) -> int | None:
    """Element count of a tensor (``numel()``) or numpy value (``size``)."""
    numel = getattr(value, "numel", None)
    if callable(numel):
        return int(numel())
    size = getattr(value, "size", None)
    return size if isinstance(size, int) else None


def sanitize(value: Any, where: str = "metrics") -> Any:
    """Make ``value`` strict-JSON-safe: tensors/numpy to Python, NaN/inf to None."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        log.warning("%s is %r: written as null (JSON has no NaN/Infinity)", where, value)
        return None
    if isinstance(value, Mapping):
        return {str(k): sanitize(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if hasattr(value, "item") and _numel(value) == 1:
        return sanitize(value.item(), where)
    if hasattr(value, "tolist"):
        return sanitize(value.tolist(), where)
    raise DethpcError(f"{where} has a value of type {type(value).__name__} that cannot be "
                      "written as JSON; report numbers, strings, lists or dicts")


class MetricsWriter:
    """Appends records to ``metrics.jsonl`` durably, one line at a time.

    If a previous run died in the middle of a line, a newline is written first so
    that the next record starts on a line of its own (the daemon skips the broken one).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fh: Any = None

    def _open(self) -> Any:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(self.path, "ab")  # noqa: SIM115 - kept open for the run
            if ends_mid_line(self.path):
                fh.write(b"\n")
            self._fh = fh
        return self._fh

    def write(self, record: Mapping[str, Any]) -> None:
        clean = sanitize(dict(record), str(record.get("kind", "record")))
        line = json.dumps(clean, allow_nan=False, separators=(",", ":"))
        with self._lock:
            fh = self._open()
            fh.write(line.encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def _check_steps(steps_completed: int) -> int:
    if isinstance(steps_completed, bool) or not isinstance(steps_completed, int):
        raise DethpcError(f"steps_completed must be an int, got {steps_completed!r}")
    if steps_completed < 0:
        raise DethpcError(f"steps_completed must be >= 0, got {steps_completed}")
    return steps_completed


def _check_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(metrics, Mapping):
        raise DethpcError(f"metrics must be a dict of name -> value, got {type(metrics).__name__}")
    return dict(metrics)


class TrainContext:
    """``report_training_metrics`` / ``report_validation_metrics`` into metrics.jsonl."""

    def __init__(self, writer: MetricsWriter | None, dist: DistributedContext) -> None:
        self._writer = writer
        self._dist = dist

    def _write(self, record: dict[str, Any]) -> None:
        if self._writer is not None and self._dist.rank == 0:
            record["time"] = time.time()
            self._writer.write(record)

    def report_training_metrics(self, steps_completed: int, metrics: Mapping[str, Any],
                                batch_metrics: list[Mapping[str, Any]] | None = None) -> None:
        """Record training metrics at ``steps_completed`` (rank 0 only; others no-op)."""
        record: dict[str, Any] = {"kind": "training", "steps": _check_steps(steps_completed),
                                  "metrics": _check_metrics(metrics)}
        if batch_metrics is not None:
            record["batch_metrics"] = [dict(m) for m in batch_metrics]
        self._write(record)

    def report_validation_metrics(self, steps_completed: int,
                                  metrics: Mapping[str, Any]) -> None:
        """Record validation metrics (the searcher reads its metric from these)."""
        self._write({"kind": "validation", "steps": _check_steps(steps_completed),
                     "metrics": _check_metrics(metrics)})

    def report_metrics(self, group: str, steps_completed: int,
                       metrics: Mapping[str, Any]) -> None:
        """Determined's ``report_metrics(group, ...)``: ``"training"``/``"validation"`` go
        where the two methods above put them; another group is recorded in
        metrics.jsonl as ``{"kind": "metrics", "group": ...}`` (kept, not ingested)."""
        if group == "training":
            self.report_training_metrics(steps_completed, metrics)
        elif group == "validation":
            self.report_validation_metrics(steps_completed, metrics)
        elif not isinstance(group, str) or not group or "." in group:
            raise DethpcError(f"metrics group {group!r} must be a non-empty name without '.'")
        else:
            self._write({"kind": "metrics", "group": group,
                         "steps": _check_steps(steps_completed),
                         "metrics": _check_metrics(metrics)})

    def report_progress(self, progress: float) -> None:
        """Fraction of training done, in [0, 1] (Determined's ``report_progress``).

        Recorded as a ``progress`` line in metrics.jsonl (for people and tools; the
        daemon's searchers do not need it)."""
        if isinstance(progress, bool) or not isinstance(progress, int | float) or not (
                0 <= progress <= 1):
            raise DethpcError(f"progress must be a number between 0 and 1, not {progress!r}")
        self._write({"kind": "progress", "progress": float(progress)})

    def set_status(self, status: str) -> None:
        """Determined shows this in its WebUI; dethpc logs it (rank 0)."""
        if self._dist.rank == 0:
            log.info("trial status: %s", status)

    def report_checkpoint(self, steps_completed: int, uuid: str,
                          metadata: Mapping[str, Any]) -> None:
        """Used by the checkpoint context after a checkpoint is complete."""
        self._write({"kind": "checkpoint", "steps": _check_steps(steps_completed),
                     "uuid": uuid, "metadata": dict(metadata)})

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class DummyTrainContext(TrainContext):
    """Off-cluster twin: metrics go to the log, nothing is written."""

    def __init__(self, dist: DistributedContext | None = None) -> None:
        super().__init__(None, dist or DistributedContext())

    def _write(self, record: dict[str, Any]) -> None:
        if self._dist.rank == 0:
            log.info("%s", json.dumps(sanitize(record), allow_nan=False))
