"""Ingesting one trial's files into the store, from stored byte offsets.

Owns: ``Ingest`` -- the offsets of every open trial's files in one query (``offset``),
the trials not worth opening (``unwritten``), and each new line of ``metrics.jsonl``
(metric rows, validations fed to the searcher, checkpoint rows, and the records of
Determined's master calls through ``master_calls.MasterCalls``) and ``exits.jsonl``
(the job's last exit record, a free run counted) carried into rows; each validation
the searcher took is noted for the trial's ``searched`` marker (``Outcome.searched``).
Must not: decide what a line means (``ingest_rules``) or what a job's end means
(``job_ends``); write files; call a backend. Offsets commit with the rows they produced,
so a daemon killed mid-tick re-reads the same lines.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from dethpc.common.jsonlines import metric_value, read_new_lines
from dethpc.common.paths import EXITS_FILE, METRICS_FILE
from dethpc.config.model import ExperimentConfig
from dethpc.control.reconcile.ingest_rules import (
    LineKind,
    free_exit_note,
    improves,
    job_for_record,
    line_kind,
    parse_exit_record,
)
from dethpc.control.reconcile.master_calls import MasterCalls
from dethpc.control.reconcile.rows import TERMINAL_TRIAL_STATES, TickRows
from dethpc.control.reconcile.searcher_ops import SearcherOps
from dethpc.control.reconcile.skip_rules import nothing_written_yet
from dethpc.jobs.jobscript import checkpoint_dir
from dethpc.searchers import replay
from dethpc.store.models import Checkpoint, IngestOffset, Metric, Trial


class Ingest:
    """Reads the trial files of one experiment's tick."""

    def __init__(self, rows: TickRows, ops: SearcherOps, cfg: ExperimentConfig) -> None:
        self.rows, self.ops, self.cfg = rows, ops, cfg
        self.calls = MasterCalls(rows)
        #: a checkpoint row was added this tick (GC looks at every checkpoint then)
        self.new_checkpoints = False
        #: ingest offsets of the trials open when first needed (``offset``)
        self._offsets: dict[tuple[int, str], IngestOffset] | None = None
        self._offsets_of: set[int] = set()
        #: the trials among those with an offset row (something was ingested)
        self._ingested: set[int] = set()

    def offset(self, trial: Trial, name: str) -> IngestOffset | None:
        """The stored offset row of one file of ``trial`` (None: nothing ingested yet).
        The rows of every open trial come in one query on first use (a lookup per
        trial and file was most of a tick at thousands of trials); a trial that was
        not open then (ended, with a live job) is looked up alone."""
        assert trial.id is not None
        if self._offsets is None:
            self._offsets = {(o.trial_id, o.file): o for o in self.rows.s.exec(
                select(IngestOffset).join(Trial, col(Trial.id) == IngestOffset.trial_id)
                .where(Trial.experiment_id == self.rows.exp_id,
                       col(Trial.state).not_in(TERMINAL_TRIAL_STATES)))}
            self._offsets_of = {t.id for t in self.rows.trials.values()
                                if t.id is not None and not t.state.is_terminal}
            self._ingested = {trial_id for trial_id, _ in self._offsets}
        if trial.id in self._offsets_of:
            return self._offsets.get((trial.id, name))
        return self.rows.s.get(IngestOffset, (trial.id, name))

    def unwritten(self, trial: Trial) -> bool:
        """``nothing_written_yet`` for ``trial``: its live job as this tick's poll saw it,
        and whether anything of it was ever ingested."""
        job = self.rows.live_job(trial)
        info = self.rows.infos.get(job.ref) if job is not None and job.ref else None
        if info is None or trial.id is None:
            return False
        self.offset(trial, METRICS_FILE)  # loads the open trials' rows once
        ingested = (trial.id not in self._offsets_of or trial.id in self._ingested
                    or trial.steps_completed > 0 or trial.restarts > 0 or trial.runs > 0)
        return nothing_written_yet(info.state, info.restart_count, ingested=ingested)

    def read(self, trial: Trial, *, exits: bool = True) -> None:
        """Carry the new lines of the trial's metrics.jsonl (and, with ``exits``, its
        exits.jsonl) into rows, from the stored offsets, and store the new offsets."""
        tp = self.rows.tpaths(trial)
        files: list[tuple[str, Path, Callable[[Trial, dict[str, Any]], None]]] = [
            (METRICS_FILE, tp.metrics, self._metric_line)]
        if exits:
            files.append((EXITS_FILE, tp.exit_log, self._exit_line))
        for name, path, handler in files:
            row = self.offset(trial, name)
            start = row.offset if row is not None else 0
            chunk = read_new_lines(path, start)
            if chunk.new_offset == start:
                continue
            if row is None:
                assert trial.id is not None
                row = IngestOffset(trial_id=trial.id, file=name, offset=0)
                if self._offsets is not None:
                    self._offsets[(trial.id, name)] = row
                    self._ingested.add(trial.id)
            for rec in chunk.records:
                handler(trial, rec)
            row.offset = chunk.new_offset
            self.rows.s.add(row)

    # ------------------------------------------------------------------ lines
    def _metric_line(self, trial: Trial, rec: dict[str, Any]) -> None:
        kind, steps = line_kind(rec), int(rec.get("steps") or 0)
        assert trial.id is not None
        if kind in (LineKind.TRAINING, LineKind.VALIDATION):
            metrics = rec.get("metrics") or {}
            self.rows.s.add(Metric(trial_id=trial.id, kind=kind.value, steps=steps,
                                   metrics=dict(metrics),
                                   time=float(rec.get("time") or self.rows.now)))
            trial.steps_completed = max(trial.steps_completed, steps)
            self.rows.s.add(trial)
            if kind == LineKind.VALIDATION:
                self._validation(trial, steps, metrics)
        elif kind == LineKind.CHECKPOINT:
            self._checkpoint(trial, steps, rec)
        elif kind == LineKind.EARLY_EXIT:
            self.calls.early_exit(trial, rec)
        elif kind == LineKind.METADATA:
            self.calls.metadata(trial, rec)
        elif kind == LineKind.ALERT:
            self.calls.alert(trial, rec)
        elif kind == LineKind.CHECKPOINT_DELETED:
            self.calls.checkpoint_deleted(trial, rec)

    def _validation(self, trial: Trial, steps: int, metrics: dict[str, Any]) -> None:
        value = metric_value(metrics, self.cfg.searcher.metric)
        if value is None:
            self.rows.event("warning", f"validation at {steps} lacks a numeric "
                            f"{self.cfg.searcher.metric!r}", trial)
            return
        trial.latest_validation = value
        if improves(value, trial.best_validation,
                    smaller_is_better=self.cfg.searcher.smaller_is_better):
            trial.best_validation = value
        for ck in self.rows.s.exec(select(Checkpoint).where(
                Checkpoint.trial_id == trial.id, Checkpoint.steps_completed == steps)):
            ck.validation_metric = value
            self.rows.s.add(ck)
        self.rows.s.add(trial)
        self.rows.out.changed = True
        if not trial.state.is_terminal:
            self.ops.feed(replay.validation(trial.request_id, value, steps), trial)
            # the searcher has decided on it (a stop is in the stop file by now): the
            # trial waiting at a rung may go on once the marker is written
            marker = str(self.rows.tpaths(trial).searched)
            self.rows.out.searched[marker] = max(self.rows.out.searched.get(marker, 0), steps)

    def _checkpoint(self, trial: Trial, steps: int, rec: dict[str, Any]) -> None:
        assert trial.id is not None
        s, uuid = self.rows.s, str(rec["uuid"])
        if s.get(Checkpoint, uuid) is not None:
            return
        metric = s.exec(select(Metric).where(
            Metric.trial_id == trial.id, Metric.kind == LineKind.VALIDATION.value,
            Metric.steps == steps)).first()
        value = metric_value(metric.metrics, self.cfg.searcher.metric) if metric else None
        exp = self.rows.exp
        path = checkpoint_dir(self.cfg, Path(exp.run_dir), self.rows.exp_id, trial.id) / uuid
        s.add(Checkpoint(uuid=uuid, experiment_id=self.rows.exp_id, trial_id=trial.id,
                         steps_completed=steps, path=str(path),
                         meta=dict(rec.get("metadata") or {}),
                         validation_metric=value,
                         created_at=float(rec.get("time") or self.rows.now)))
        trial.latest_checkpoint = uuid
        # a checkpoint at step N is N steps done, metrics reported or not (a bash loop
        # may only checkpoint: `dethpc report checkpoint --step N`)
        trial.steps_completed = max(trial.steps_completed, steps)
        s.add(trial)
        self.new_checkpoints = True

    def _exit_line(self, trial: Trial, raw: dict[str, Any]) -> None:
        rec = parse_exit_record(raw)
        candidates = self.rows.jobs_of.get(trial.id, []) if trial.id is not None else []
        job = job_for_record(candidates, str(raw.get("job", "")))
        if job is None:
            return
        job.exit_reason, job.exit_code, job.exit_run = rec.reason, rec.code, rec.run
        self.rows.s.add(job)
        if rec.free:
            trial.runs += 1
            self.rows.s.add(trial)
            self.rows.event(rec.reason.value, free_exit_note(rec, trial.steps_completed), trial)

