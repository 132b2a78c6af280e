"""TensorBoard event files derived from trials' ``metrics.jsonl`` (outside the job).

Owns: reading a trial's metrics records into one series per metric (pure:
``series``), appending the new points of each series to a run's event file with
the ``tensorboard`` package's own writer (``Deriver``), and copying what the training
code itself wrote to the trial's ``tensorboard/`` directory (Determined's
``get_tensorboard_path()``) beside them, as it grows (``mirror``).

Choices (docs/observability.md): the source is each trial's ``metrics.jsonl`` (the same
records the daemon ingests into the store; reading files needs no database, so the
same code runs on the login node and in a ``--slurm`` job). A requeued or resumed trial
appends to the same file: the curve is one run per trial with no duplicate steps, and
where a resume from an older checkpoint repeats a step, the first value written wins
(the event files are only ever appended to, so a running TensorBoard never sees a
step change under it). The x-axis is the record's ``steps``: the experiment's time unit
(batches, records or epochs), named in each tag's description. The trial's own event
files (``<trial dir>/tensorboard/``, any depth) appear under ``exp<E>/trial<T>/tensorboard/``
with the same relative paths: each of its directories is a run of its own (TensorBoard
reads one growing file per directory, so the user's files never share one with the
derived ones). They are copied by appending what each file grew by since the last
refresh (event files are append-only; one that shrank was rewritten and is copied
again whole); a copy rather than a link, since the task's directory and the run
directory may be on different file systems and TensorBoard does not follow directory
links.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dethpc.common.kinds import MetricKind
from dethpc.common.paths import ExperimentPaths, TrialPaths

#: the record kinds that become scalars, and their tags' prefix
KINDS = tuple(k.value for k in MetricKind)


def series(records: Iterable[dict[str, Any]]) -> dict[str, list[tuple[int, float, float]]]:
    """``tag -> [(step, value, wall_time), ...]`` sorted by step, one point per step (the
    first record of a step wins). Non-numeric values and records of other kinds are
    skipped; a tag is ``<kind>/<metric>``."""
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for rec in records:
        kind = rec.get("kind")
        if kind not in KINDS:
            continue
        try:
            step = int(rec.get("steps") or 0)
        except (TypeError, ValueError):
            continue
        wall = _number(rec.get("time")) or 0.0
        for name, value in (rec.get("metrics") or {}).items():
            v = _number(value)
            if v is None:
                continue
            out.setdefault(f"{kind}/{name}", {}).setdefault(step, (v, wall))
    return {tag: [(s, v, w) for s, (v, w) in sorted(pts.items())]
            for tag, pts in sorted(out.items())}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def read_records(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The complete JSON lines of ``path`` from byte ``offset`` ([] when missing), and the
    offset after the last complete line; a torn last line (the job is writing it) waits
    for the next read, lines that are not JSON objects are skipped."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    complete = data.rfind(b"\n") + 1
    out = []
    for line in data[:complete].split(b"\n")[:-1]:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out, offset + complete


def mirror(src: Path, dest: Path, copied: dict[Path, int]) -> int:
    """Bring ``dest`` up to date with the files under ``src`` (missing: nothing): each file
    gets the bytes it grew by since ``copied[file]`` (its size at the last call), or the
    whole of it when it shrank. Returns the bytes copied. Links and special files are
    skipped."""
    total = 0
    if not src.is_dir():
        return 0
    for root, _dirs, files in os.walk(src):
        for name in sorted(files):
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                continue
            size = path.stat().st_size
            done = copied.get(path, 0)
            if size == done:
                continue
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            start = done if size > done and target.exists() else 0
            with open(path, "rb") as fin, open(target, "r+b" if start else "wb") as fout:
                fin.seek(start)
                fout.seek(start)
                data = fin.read(size - start)
                fout.write(data)
                fout.truncate()
            copied[path] = start + len(data)
            total += len(data)
    return total


@dataclass(frozen=True)
class Source:
    """One experiment to derive: its run directory, time unit and trials (None: all)."""

    experiment_id: int
    run_dir: Path
    unit: str
    trials: frozenset[int] | None = None

    def trial_files(self) -> dict[int, Path]:
        """``trial id -> metrics.jsonl`` of the trials present now (new ones appear)."""
        paths = ExperimentPaths(self.run_dir)
        return {t: paths.trial(t).metrics for t in paths.trial_ids()
                if self.trials is None or t in self.trials}

    def to_arg(self) -> str:
        """``ID:UNIT:TRIALS:RUN_DIR`` (TRIALS: comma-separated, or ``*``)."""
        trials = "*" if self.trials is None else ",".join(map(str, sorted(self.trials)))
        return f"{self.experiment_id}:{self.unit}:{trials}:{self.run_dir}"

    @staticmethod
    def from_arg(text: str) -> Source:
        exp, unit, trials, run_dir = text.split(":", 3)
        return Source(int(exp), Path(run_dir), unit,
                      None if trials == "*" else frozenset(int(t) for t in trials.split(",")
                                                           if t))


@dataclass
class Deriver:
    """Appends each trial's new points to ``logdir/exp<E>/trial<T>`` (one run per trial);
    remembers how far each file was read and per tag the last step written, so a refresh
    reads and writes only what is new (a step at or below the last written is a repeat:
    the first value stays)."""

    logdir: Path
    sources: list[Source]
    written: dict[tuple[int, int, str], int] = field(default_factory=dict)
    offsets: dict[Path, int] = field(default_factory=dict)
    #: one open writer (one event file) per run, flushed after each refresh
    writers: dict[tuple[int, int], Any] = field(default_factory=dict)
    #: bytes of each file of the trials' own tensorboard/ directories copied so far
    copied: dict[Path, int] = field(default_factory=dict)

    def refresh(self) -> int:
        """Derive what is new; the number of points written."""
        from tensorboard.summary import Writer

        count = 0
        for src in self.sources:
            for trial, path in src.trial_files().items():
                run = self.logdir / f"exp{src.experiment_id}" / f"trial{trial}"
                mirror(TrialPaths(path.parent).tensorboard, run / "tensorboard", self.copied)
                new = []
                records, self.offsets[path] = read_records(path, self.offsets.get(path, 0))
                for tag, points in series(records).items():
                    last = self.written.get((src.experiment_id, trial, tag))
                    new += [(tag, p) for p in points if last is None or p[0] > last]
                if not new:
                    continue
                writer = self.writers.get((src.experiment_id, trial))
                if writer is None:
                    writer = Writer(str(run))
                    self.writers[(src.experiment_id, trial)] = writer
                for tag, (step, value, wall) in new:
                    writer.add_scalar(tag, value, step, wall_time=wall or None,
                                      description=f"x: {src.unit}")
                    self.written[(src.experiment_id, trial, tag)] = step
                writer.flush()
                count += len(new)
        return count

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()
