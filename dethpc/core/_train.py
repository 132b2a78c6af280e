"""Reporting metrics: the writer of ``metrics.jsonl`` and the train sub-context.

Owns: ``MetricsWriter`` (one JSON object per line, flushed and fsync'd per
line, never invalid JSON), ``TrainContext`` (rank 0 writes, other ranks no-op;
training/validation/other-group metrics, progress, Determined's early exit, alerts,
the trial's metadata file, its TensorBoard directory, the experiment's best validation
read from its trials' files), ``EarlyExitReason``, ``TensorboardMode``
and ``DummyTrainContext`` (logs only, used off-cluster).
Must not: import torch (tensors are converted through ``.item()``/``.tolist()``),
aggregate metrics across ranks (the caller does), or read this trial's metrics.jsonl
back (``best_validation`` reads the experiment's trials' files, this one's included,
only when asked).
"""

from __future__ import annotations

import enum
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dethpc.common.errors import DethpcError
from dethpc.common.jsonlines import ends_mid_line
from dethpc.common.paths import TrialPaths
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


class TensorboardMode(enum.Enum):
    """Determined's ``TensorboardMode``. dethpc writes no TensorBoard files of its own
    (``dethpc tensorboard`` derives them from metrics.jsonl); the mode only decides
    whether ``upload_tensorboard_files()`` may be called (MANUAL), as in Determined."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


class EarlyExitReason(enum.Enum):
    """Why a trial ends before its length (Determined's values)."""

    INVALID_HP = "EXITED_REASON_INVALID_HP"
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"


#: the ``reason`` an ``early_exit`` record carries, per ``EarlyExitReason``
EARLY_EXIT_WORDS = {EarlyExitReason.INVALID_HP: "invalid_hp",
                    EarlyExitReason.USER_REQUESTED_STOP: "user_requested_stop"}
#: the levels ``Context.alert`` accepts (Determined's)
ALERT_LEVELS = ("debug", "info", "warn", "error")


def write_json_atomic(path: Path, data: Any) -> None:
    """Replace ``path`` by a JSON file holding ``data`` (temp file, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, allow_nan=False, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def best_validation(trial_dir: Path, metric: str, smaller_is_better: bool) -> float | None:
    """The best ``metric`` of every validation record of the experiment's trials
    (``<run dir>/trials/*/metrics.jsonl``; only this trial's file when it has no siblings,
    as a detached job), or None when none reported it. Broken lines are skipped."""
    root = trial_dir.parent
    files = (sorted(root.glob("*/metrics.jsonl")) if root.name == "trials"
             else [TrialPaths(trial_dir).metrics])
    best: float | None = None
    for path in files:
        try:
            lines = path.read_bytes().splitlines()
        except OSError:
            continue
        for line in lines:
            if b'"validation"' not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            value = rec.get("metrics", {}).get(metric) if isinstance(rec, dict) \
                and rec.get("kind") == "validation" and isinstance(rec.get("metrics"), dict) \
                else None
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value):
                continue
            if best is None or (value < best if smaller_is_better else value > best):
                best = float(value)
    return best


class TrainContext:
    """``report_training_metrics`` / ``report_validation_metrics`` into metrics.jsonl,
    and the rest of Determined's ``TrainContext`` (docs/core-api.md)."""

    def __init__(self, writer: MetricsWriter | None, dist: DistributedContext, *,
                 trial_dir: Path | None = None,
                 config: Callable[[], Mapping[str, Any]] | None = None,
                 tensorboard_mode: TensorboardMode = TensorboardMode.AUTO) -> None:
        self._writer = writer
        self._dist = dist
        self._trial_dir = trial_dir
        self._config = config
        self._tensorboard_mode = TensorboardMode(tensorboard_mode)
        self._early_exit: EarlyExitReason | None = None
        #: called with the steps of each validation reported (``rung_hook``: at a rung,
        #: the next preemption check waits for the searcher's verdict)
        self.on_validation: Callable[[int], None] | None = None

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
        """Record validation metrics (the searcher reads its metric from these). At a
        rung of the searcher, the next ``preempt.should_preempt()`` waits for its verdict
        on them (docs/searchers.md, "Stop latency")."""
        self._write({"kind": "validation", "steps": _check_steps(steps_completed),
                     "metrics": _check_metrics(metrics)})
        if self.on_validation is not None:
            self.on_validation(steps_completed)

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

    # ------------------------------------------------------- Determined's extras
    def report_early_exit(self, reason: EarlyExitReason) -> None:
        """Say why the trial ends before its length: an ``early_exit`` record
        (``{"kind": "early_exit", "reason": "invalid_hp"|"user_requested_stop"}``, rank 0)
        that the daemon reads as Determined's master reads the call. Once per run, as
        Determined (a second call is logged and dropped). The process should then exit
        normally; ``det.InvalidHP`` raised out of ``core.init()``'s block does both."""
        try:
            why = EarlyExitReason(reason)
        except ValueError:
            raise DethpcError(f"report_early_exit({reason!r}): give a "
                              "det.core.EarlyExitReason (INVALID_HP or USER_REQUESTED_STOP)") \
                from None
        if self._early_exit is not None:
            log.warning("early exit already reported (%s); ignoring %s",
                        self._early_exit.name, why.name)
            return
        self._early_exit = why
        log.info("report_early_exit(%s)", why.name)
        self._write({"kind": "early_exit", "reason": EARLY_EXIT_WORDS[why]})

    @property
    def early_exit(self) -> EarlyExitReason | None:
        """The early exit this process reported, if any."""
        return self._early_exit

    def report_alert(self, title: str | None, description: str | None, level: str) -> None:
        """``Context.alert``: an ``alert`` record (rank 0) and a log line at ``level``."""
        if level not in ALERT_LEVELS:
            raise DethpcError(f"alert level {level!r} is not one of {', '.join(ALERT_LEVELS)}")
        if self._dist.rank != 0:
            return
        log.log({"warn": logging.WARNING, "error": logging.ERROR, "debug": logging.DEBUG}
                .get(level, logging.INFO), "alert: %s: %s", title or "", description or "")
        self._write({"kind": "alert", "title": title or "", "description": description or "",
                     "level": level})

    def _metadata_path(self) -> Path | None:
        return None if self._trial_dir is None else TrialPaths(self._trial_dir).run_metadata

    def set_metadata(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the trial's metadata (Determined's run metadata) with ``metadata``:
        ``trial-metadata.json`` in the trial directory (rank 0, atomically) and a
        ``metadata`` record for the daemon; returns what was set."""
        if not isinstance(metadata, Mapping):
            raise DethpcError(f"set_metadata() takes a dict, got {type(metadata).__name__}")
        clean = sanitize(dict(metadata), "metadata")
        path = self._metadata_path()
        if path is not None and self._dist.rank == 0:
            write_json_atomic(path, clean)
        self._write({"kind": "metadata", "metadata": clean})
        return dict(clean)

    def get_metadata(self) -> dict[str, Any] | None:
        """The trial's metadata last set (by any run of the trial), None when never set."""
        path = self._metadata_path()
        if path is None:
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise DethpcError(f"trial metadata {path} cannot be read: {exc}") from exc
        return data if isinstance(data, dict) else None

    def get_tensorboard_path(self) -> Path:
        """Where this trial's TensorBoard files go: ``<trial dir>/tensorboard`` (created;
        on the shared filesystem, so nothing needs uploading)."""
        if self._trial_dir is None:
            raise DethpcError("get_tensorboard_path() needs a trial directory")
        path = TrialPaths(self._trial_dir).tensorboard
        path.mkdir(parents=True, exist_ok=True)
        return path

    def upload_tensorboard_files(
            self, selector: Callable[[Path], bool] = lambda _: True,
            mangler: Callable[[Path, int], Path] = lambda p, __: p) -> None:
        """Determined copies the TensorBoard files to its storage; here they are written
        on the shared filesystem already, so this checks the mode (MANUAL, as Determined
        requires) and does nothing else."""
        if self._tensorboard_mode is not TensorboardMode.MANUAL:
            raise DethpcError("upload_tensorboard_files() can only be used with "
                              "core.init(tensorboard_mode=TensorboardMode.MANUAL), as in "
                              "Determined")
        del selector, mangler

    def get_experiment_best_validation(self) -> float | None:
        """The best ``searcher.metric`` any trial of the experiment reported in a
        validation so far (lowest or highest by ``searcher.smaller_is_better``, default
        True), read from the trials' metrics.jsonl files; None when there is none yet."""
        config = dict(self._config()) if self._config is not None else {}
        raw = config.get("searcher")
        searcher: dict[str, Any] = raw if isinstance(raw, dict) else {}
        metric = searcher.get("metric")
        if self._trial_dir is None or not isinstance(metric, str) or not metric:
            return None
        smaller = searcher.get("smaller_is_better", True)
        return best_validation(self._trial_dir, metric, smaller is not False)

    def report_checkpoint(self, steps_completed: int, uuid: str,
                          metadata: Mapping[str, Any]) -> None:
        """Used by the checkpoint context after a checkpoint is complete."""
        self._write({"kind": "checkpoint", "steps": _check_steps(steps_completed),
                     "uuid": uuid, "metadata": dict(metadata)})

    def report_checkpoint_deleted(self, uuid: str) -> None:
        """Used by the checkpoint context's ``delete()`` once the checkpoint is hidden."""
        self._write({"kind": "checkpoint_deleted", "uuid": uuid})

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class DummyTrainContext(TrainContext):
    """Off-cluster twin: metrics go to the log, nothing is written (except TensorBoard
    files, which go where ``tensorboard_path`` says, default ``./tensorboard``)."""

    def __init__(self, tensorboard_path: Path | None = None,
                 dist: DistributedContext | None = None, *,
                 tensorboard_mode: TensorboardMode = TensorboardMode.AUTO) -> None:
        super().__init__(None, dist or DistributedContext(), tensorboard_mode=tensorboard_mode)
        self._tensorboard_path = tensorboard_path
        self._metadata: dict[str, Any] | None = None

    def set_metadata(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        self._metadata = super().set_metadata(metadata)
        return dict(self._metadata)

    def get_metadata(self) -> dict[str, Any] | None:
        return None if self._metadata is None else dict(self._metadata)

    def get_tensorboard_path(self) -> Path:
        path = Path(self._tensorboard_path or Path.cwd() / "tensorboard")
        path.mkdir(parents=True, exist_ok=True)
        return path

    def get_experiment_best_validation(self) -> float | None:
        return None

    def upload_tensorboard_files(
            self, selector: Callable[[Path], bool] = lambda _: True,
            mangler: Callable[[Path, int], Path] = lambda p, __: p) -> None:
        """Off-cluster: nothing to upload, in either mode (as Determined's dummy)."""

    def _write(self, record: dict[str, Any]) -> None:
        if self._dist.rank == 0:
            log.info("%s", json.dumps(sanitize(record), allow_nan=False))
