"""Ingesting one trial's files into the store, from stored byte offsets.

Owns: ``Ingest`` -- the offsets of the tick's trials' files in one query (``offset``),
the trials not worth opening (``unwritten``), the tick's files read ahead with what
their lines need from the store looked up once for all of them (``read_ahead``: three
queries a tick, not three per trial that reports), and each new line of ``metrics.jsonl``
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import BindParameter, bindparam
from sqlmodel import col, select

from dethpc.common.jsonlines import Chunk, metric_value, read_new_lines
from dethpc.common.kinds import EventKind, MetricKind
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
from dethpc.control.reconcile.rows import TickRows, chunks
from dethpc.control.reconcile.searcher_ops import SearcherOps
from dethpc.control.reconcile.skip_rules import nothing_written_yet
from dethpc.jobs.jobscript import trial_checkpoint_dir
from dethpc.searchers import replay
from dethpc.store.bulk import insert_rows
from dethpc.store.models import Checkpoint, IngestOffset, Metric, Trial

#: values per ``IN (...)`` of a prefetch (SQLite before 3.32 allows 999 parameters)
IN_BATCH = 500


@dataclass
class Pending:
    """New lines of one file of a trial, read from ``start``, not yet carried in."""

    name: str
    handler: Callable[[Trial, dict[str, Any]], None]
    start: int
    chunk: Chunk


def _spans(keys: set[tuple[int, int]]) -> list[tuple[list[int], list[int]]]:
    """(trial ids, steps) pairs of ``IN`` lists whose product covers ``keys``: the
    trials in pieces of ``IN_BATCH``, each with the steps its trials want."""
    trial_ids = sorted({t for t, _ in keys})
    out = []
    for i in range(0, len(trial_ids), IN_BATCH):
        part = set(trial_ids[i:i + IN_BATCH])
        steps = sorted({n for t, n in keys if t in part})
        out += [(sorted(part), steps[j:j + IN_BATCH]) for j in range(0, len(steps), IN_BATCH)]
    return out


#: the ingest offsets of some trials (``ids``), built once (``rows``' statements); no
#: autoflush first: no offset row is added or changed before they are read
OFFSETS_OF = select(IngestOffset).where(
    col(IngestOffset.trial_id).in_(bindparam("ids", expanding=True))).execution_options(
    autoflush=False)

#: ``_prefetch``'s reads, built once: checkpoints by uuid, validations and checkpoints
#: at some steps of some trials
_IDS: BindParameter[list[int]] = bindparam("ids", expanding=True)
_STEPS: BindParameter[list[int]] = bindparam("steps", expanding=True)
CHECKPOINTS_BY_UUID = select(Checkpoint).where(
    col(Checkpoint.uuid).in_(bindparam("uuids", expanding=True)))
VALIDATIONS_AT = select(Metric).where(
    col(Metric.trial_id).in_(_IDS), Metric.kind == MetricKind.VALIDATION,
    col(Metric.steps).in_(_STEPS)).order_by(col(Metric.id))
CHECKPOINTS_AT = select(Checkpoint).where(
    col(Checkpoint.trial_id).in_(_IDS), col(Checkpoint.steps_completed).in_(_STEPS))


def _load_offsets(rows: TickRows) -> tuple[dict[tuple[int, str], IngestOffset], set[int],
                                           set[int]]:
    """The ingest offsets of the tick's loaded trials, open or ended with a live job (their
    last lines are still to come), in one query where their ids fit in one; the open
    ones' ids, and the ended ones'. A trial loaded later (a quiet one woken) has its
    offsets looked up alone (``Ingest.offset``)."""
    loaded = sorted(rows.trials)
    offsets = {(o.trial_id, o.file): o for chunk in chunks(loaded)
               for o in rows.s.exec(OFFSETS_OF, params={"ids": chunk})}
    open_ids = {t.id for t in rows.trials.values()
                if t.id is not None and not t.state.is_terminal}
    return offsets, open_ids, set(loaded) - open_ids


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
        #: the loaded trials that had ended then (a live job's last lines), read with them
        self._ended_read: set[int] = set()
        #: the trials among those with an offset row (something was ingested)
        self._ingested: set[int] = set()
        #: rows this tick added, looked up without a flush: a flush and two queries per
        #: checkpoint line were most of a busy tick's CPU (``_checkpoint``)
        self._fresh_checkpoints: dict[str, Checkpoint] = {}
        #: the same by (trial, steps): a validation finds this tick's checkpoints at its
        #: steps without scanning them all (a catch-up tick of 15,000 ended trials at
        #: 50,000 did not end in 10 minutes: 30,000 validations x 30,000 checkpoints)
        self._fresh_at: dict[tuple[int, int], list[Checkpoint]] = {}
        #: validations' metrics by (trial, steps): this tick's lines, and the stored ones
        #: at the steps of this tick's checkpoint lines (``_prefetch``: those keys are
        #: in ``_validations_known``, found or not)
        self._validations: dict[tuple[int, int], dict[str, Any]] = {}
        self._validations_known: set[tuple[int, int]] = set()
        #: the metric rows of this tick's lines, inserted in one statement at its end
        #: (``insert_metrics``): an ORM object and a flush per line were a fifth of the
        #: daemon's CPU in a pool search (bench/daemon_cost). Nothing reads them back
        #: this tick but through ``_validations`` (each trial's file is read once)
        self._metric_rows: list[dict[str, Any]] = []
        #: checkpoint uuids looked up by a prefetch, and those of them stored
        self._uuids_checked: set[str] = set()
        self._uuids_stored: set[str] = set()
        #: stored checkpoint rows by (trial, steps) at the steps of validation lines
        #: (``_checkpoints_at``; the keys looked up, found or not, are in the second)
        self._ckpts_at: dict[tuple[int, int], list[Checkpoint]] = {}
        self._ckpts_at_known: set[tuple[int, int]] = set()
        #: files read ahead of their turn (``read_ahead``): trial id -> (exits read
        #: too, its files' new lines)
        self._ahead: dict[int, tuple[bool, list[Pending]]] = {}

    def offset(self, trial: Trial, name: str) -> IngestOffset | None:
        """The stored offset row of one file of ``trial`` (None: nothing ingested yet).
        The rows of every trial loaded then come in one query on first use (a lookup
        per trial and file was most of a tick at thousands of trials); a trial loaded
        later (a quiet one woken, one created this tick) is looked up alone."""
        assert trial.id is not None
        if self._offsets is None:
            self._offsets, self._offsets_of, self._ended_read = _load_offsets(self.rows)
            self._ingested = {trial_id for trial_id, _ in self._offsets
                              if trial_id in self._offsets_of}
        if trial.id in self._offsets_of or trial.id in self._ended_read:
            return self._offsets.get((trial.id, name))
        # added this tick and not flushed yet (``Session.get`` finds no pending row; the
        # ingest no longer flushes per line: f32 added a second row for one file)
        known = self._offsets.get((trial.id, name))
        return known if known is not None else self.rows.s.get(IngestOffset, (trial.id, name))

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

    def read_ahead(self, trials: list[Trial], *, exits: bool = True) -> None:
        """Read the new lines of ``trials``' files now, and look up what their lines
        need from the store for all of them at once (``_prefetch``): three queries per
        tick instead of three per trial that reports (issue 47 item 2). ``read`` then
        carries each trial's lines in its turn, as if it had read them itself."""
        pending = {t.id: self._pending(t, exits=exits) for t in trials if t.id is not None}
        self._prefetch([(tid, p.chunk.records) for tid, ps in pending.items()
                        for p in ps if p.name == METRICS_FILE])
        self._ahead.update((tid, (exits, ps)) for tid, ps in pending.items())

    def read(self, trial: Trial, *, exits: bool = True) -> None:
        """Carry the new lines of the trial's metrics.jsonl (and, with ``exits``, its
        exits.jsonl) into rows, from the stored offsets, and store the new offsets.
        Lines ``read_ahead`` read are taken as they were read when their offset is
        still the stored one (else the file is read again now)."""
        read_with, ahead = self._ahead.pop(trial.id or 0, (None, []))
        if read_with != exits or any(p.start != self._start(trial, p.name) for p in ahead):
            ahead = self._pending(trial, exits=exits)
            assert trial.id is not None
            self._prefetch([(trial.id, p.chunk.records) for p in ahead
                            if p.name == METRICS_FILE])
        for p in ahead:
            if p.chunk.new_offset == p.start:
                continue
            row = self.offset(trial, p.name)
            if row is None:
                assert trial.id is not None
                row = IngestOffset(trial_id=trial.id, file=p.name, offset=0)
                if self._offsets is not None:
                    self._offsets[(trial.id, p.name)] = row
                    self._ingested.add(trial.id)
            for rec in p.chunk.records:
                p.handler(trial, rec)
            row.offset = p.chunk.new_offset
            self.rows.s.add(row)

    def _start(self, trial: Trial, name: str) -> int:
        row = self.offset(trial, name)
        return row.offset if row is not None else 0

    def _pending(self, trial: Trial, *, exits: bool) -> list[Pending]:
        """The new lines of the trial's files, from their stored offsets."""
        tp = self.rows.tpaths(trial)
        files: list[tuple[str, Path, Callable[[Trial, dict[str, Any]], None]]] = [
            (METRICS_FILE, tp.metrics, self._metric_line)]
        if exits:
            files.append((EXITS_FILE, tp.exit_log, self._exit_line))
        out = []
        for name, path, handler in files:
            start = self._start(trial, name)
            out.append(Pending(name, handler, start, read_new_lines(path, start)))
        return out

    def insert_metrics(self) -> None:
        """The metric rows of the lines read so far, in their order, in one statement."""
        insert_rows(self.rows.s, Metric, self._metric_rows)
        self._metric_rows = []

    def _prefetch(self, lines: list[tuple[int, list[dict[str, Any]]]]) -> None:
        """For the metrics lines of some trials ((trial id, records) each), three queries
        instead of some per line: the stored checkpoint rows of the checkpoint lines'
        uuids (into the session's identity map, and which exist: ``_checkpoint``), the
        stored validations at those lines' steps (``_validation_at``), and the stored
        checkpoint rows at the validation lines' steps (``_checkpoints_at``). Each query
        asks for trials x steps and keeps the keys that were wanted."""
        ckpts: set[tuple[int, int]] = set()
        vals: set[tuple[int, int]] = set()
        uuids: set[str] = set()
        for trial_id, records in lines:
            for r in records:
                kind = line_kind(r)
                if kind == LineKind.CHECKPOINT and "uuid" in r:
                    uuids.add(str(r["uuid"]))
                    ckpts.add((trial_id, int(r.get("steps") or 0)))
                elif kind == LineKind.VALIDATION:
                    vals.add((trial_id, int(r.get("steps") or 0)))
        s = self.rows.s
        with s.no_autoflush:
            todo = sorted(uuids - self._uuids_checked)
            for i in range(0, len(todo), IN_BATCH):
                self._uuids_stored.update(ck.uuid for ck in s.exec(
                    CHECKPOINTS_BY_UUID, params={"uuids": todo[i:i + IN_BATCH]}))
            self._uuids_checked.update(todo)
            for trial_ids, steps in _spans(ckpts - self._validations_known):
                for m in s.exec(VALIDATIONS_AT, params={"ids": trial_ids, "steps": steps}):
                    if (m.trial_id, m.steps) in ckpts:
                        self._validations.setdefault((m.trial_id, m.steps), m.metrics)
            self._validations_known.update(ckpts)
            for trial_ids, steps in _spans(vals - self._ckpts_at_known):
                for ck in s.exec(CHECKPOINTS_AT, params={"ids": trial_ids, "steps": steps}):
                    if (ck.trial_id, ck.steps_completed) in vals:
                        self._ckpts_at.setdefault((ck.trial_id, ck.steps_completed),
                                                  []).append(ck)
            self._ckpts_at_known.update(vals)

    # ------------------------------------------------------------------ lines
    def _metric_line(self, trial: Trial, rec: dict[str, Any]) -> None:
        kind, steps = line_kind(rec), int(rec.get("steps") or 0)
        assert trial.id is not None
        if kind in (LineKind.TRAINING, LineKind.VALIDATION):
            metrics = rec.get("metrics") or {}
            self._metric_rows.append({
                "trial_id": trial.id, "kind": MetricKind(kind.value).value, "steps": steps,
                "metrics": dict(metrics), "time": float(rec.get("time") or self.rows.now)})
            trial.steps_completed = max(trial.steps_completed, steps)
            self.rows.s.add(trial)
            if kind == LineKind.VALIDATION:
                self._validations.setdefault((trial.id, steps), dict(metrics))
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
            self.rows.event(EventKind.WARNING, f"validation at {steps} lacks a numeric "
                            f"{self.cfg.searcher.metric!r}", trial)
            return
        trial.latest_validation = value
        if improves(value, trial.best_validation,
                    smaller_is_better=self.cfg.searcher.smaller_is_better):
            trial.best_validation = value
        for ck in self._checkpoints_at(trial, steps):
            ck.validation_metric = value
            self.rows.s.add(ck)
            self.rows.touched.add(ck.trial_id)
        self.rows.s.add(trial)
        self.rows.out.changed = True
        if not trial.state.is_terminal:
            self.ops.feed(replay.validation(trial.request_id, value, steps), trial)
            # the searcher has decided on it (a stop is in the stop file by now): the
            # trial waiting at a rung may go on once the marker is written
            marker = str(self.rows.tpaths(trial).searched)
            self.rows.out.searched[marker] = max(self.rows.out.searched.get(marker, 0), steps)

    def _checkpoints_at(self, trial: Trial, steps: int) -> list[Checkpoint]:
        """The trial's checkpoint rows at ``steps``: stored, and added this tick."""
        assert trial.id is not None
        if (trial.id, steps) in self._ckpts_at_known:
            found = {ck.uuid: ck for ck in self._ckpts_at.get((trial.id, steps), [])}
        else:
            with self.rows.s.no_autoflush:
                found = {ck.uuid: ck for ck in self.rows.s.exec(select(Checkpoint).where(
                    Checkpoint.trial_id == trial.id, Checkpoint.steps_completed == steps))}
        found.update((ck.uuid, ck) for ck in self._fresh_at.get((trial.id, steps), []))
        return list(found.values())

    def _validation_at(self, trial: Trial, steps: int) -> dict[str, Any] | None:
        """The metrics of the trial's (first) validation at ``steps``: stored, or added
        this tick."""
        assert trial.id is not None
        key = (trial.id, steps)
        if key in self._validations or key in self._validations_known:
            return self._validations.get(key)
        with self.rows.s.no_autoflush:
            metric = self.rows.s.exec(select(Metric).where(
                Metric.trial_id == trial.id, Metric.kind == MetricKind.VALIDATION,
                Metric.steps == steps).order_by(col(Metric.id))).first()
        return metric.metrics if metric is not None else None

    def _checkpoint(self, trial: Trial, steps: int, rec: dict[str, Any]) -> None:
        assert trial.id is not None
        s, uuid = self.rows.s, str(rec["uuid"])
        if uuid in self._fresh_checkpoints:
            return
        if uuid in self._uuids_checked:
            if uuid in self._uuids_stored:
                return
        else:
            with s.no_autoflush:
                if s.get(Checkpoint, uuid) is not None:
                    return
        metrics = self._validation_at(trial, steps)
        value = metric_value(metrics, self.cfg.searcher.metric) if metrics else None
        exp = self.rows.exp
        path = trial_checkpoint_dir(self.cfg, Path(exp.run_dir), self.rows.exp_id, trial.id) / uuid
        ck = Checkpoint(uuid=uuid, experiment_id=self.rows.exp_id, trial_id=trial.id,
                        steps_completed=steps, path=str(path),
                        meta=dict(rec.get("metadata") or {}),
                        validation_metric=value,
                        created_at=float(rec.get("time") or self.rows.now))
        s.add(ck)
        self._fresh_checkpoints[uuid] = ck
        self._fresh_at.setdefault((trial.id, steps), []).append(ck)
        self.rows.touched.add(trial.id)
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
        if rec.nodes:   # the run's nodes and end: what the bad-node rule counts
            job.nodes = ",".join(rec.nodes)
        job.ended_at = float(raw.get("time") or self.rows.now)
        self.rows.s.add(job)
        if rec.free:
            trial.runs += 1
            self.rows.s.add(trial)
            self.rows.event(EventKind(rec.reason.value),
                            free_exit_note(rec, trial.steps_completed), trial)

