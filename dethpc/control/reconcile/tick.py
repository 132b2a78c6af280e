"""One experiment's share of a daemon tick, inside one database transaction.

Owns: recording the polled job states, ingesting the trial files (metrics,
checkpoints, exit records), deciding what a job's end means for its trial
(complete, stop, pause, requeue for free, restart counted against
``max_restarts``, error), feeding the searcher (each call recorded as an event:
``dethpc.searchers.replay``), applying its actions, enacting
pause/cancel/kill, completing the experiment and checkpoint GC.
Must not: call a backend or delete files. It returns the refs to cancel and the
checkpoint directories to delete; the daemon cancels in one call with every
other experiment's refs and deletes only after this transaction commits.

Idempotency: offsets, rows, unknown-tick counts and the searcher snapshot commit
together, so a daemon killed mid-tick re-reads the same lines and makes the same
decisions. Nothing is kept in memory between ticks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam
from sqlalchemy import select as sa_select
from sqlalchemy.orm import defer
from sqlmodel import Session, col, select

from dethpc.backends.base import JobInfo, JobState
from dethpc.common.jsonlines import metric_value, read_new_lines
from dethpc.common.paths import ExperimentPaths, TrialPaths
from dethpc.config import parse_stored
from dethpc.config.model import ExperimentConfig
from dethpc.control.checkpoint_gc import CkptInfo, to_delete
from dethpc.control.job_end import (
    WAIT,
    Decision,
    ExitRecord,
    JobFacts,
    Kind,
    TrialFacts,
    Verdict,
    judge,
    nothing_to_judge,
)
from dethpc.control.reconcile.ingest_rules import parse_exit_record
from dethpc.control.reconcile.job_rules import NOT_RESUBMITTED
from dethpc.control.reconcile.skip_rules import (
    LiveRow,
    new_reasons,
    nothing_written_yet,
    quiet_job,
)
from dethpc.jobs.jobscript import checkpoint_dir
from dethpc.searchers import replay
from dethpc.searchers.base import Continue, Create, Searcher, Shutdown, Stop
from dethpc.searchers.factory import make_searcher
from dethpc.store.models import (
    Checkpoint,
    CheckpointState,
    Event,
    Experiment,
    ExperimentState,
    IngestOffset,
    Job,
    Metric,
    SearcherState,
    StopReason,
    Trial,
    TrialState,
)

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    cancel: list[str] = field(default_factory=list)
    #: checkpoint directories GC marked DELETING: the daemon removes them after commit
    delete: dict[str, str] = field(default_factory=dict)
    changed: bool = False


TERMINAL_TRIAL_STATES = [s for s in TrialState if s.is_terminal]

#: the limit a snapshot was taken under, so a change (set-concurrency) is seen once
CONCURRENCY_KEY = "_max_concurrent_trials"


def _chunks(ids: list[int], size: int = 900) -> list[list[int]]:
    """``ids`` in pieces an ``IN (...)`` takes on every SQLite build."""
    return [ids[i:i + size] for i in range(0, len(ids), size)]


def load_config(exp: Experiment) -> ExperimentConfig:
    return parse_stored(exp.config_yaml)


class ExperimentReconciler:
    """Reconciles one experiment; construct per tick, call ``run``."""

    def __init__(self, s: Session, exp: Experiment, infos: dict[str, JobInfo],
                 now: float, *, fast: bool = False) -> None:
        """``fast``: for ``run_fast`` between polls (``infos`` is empty then)."""
        self.s, self.exp, self.infos, self.now = s, exp, infos, now
        self.cfg = load_config(exp)
        self.paths = ExperimentPaths(Path(exp.run_dir))
        assert exp.id is not None
        self.exp_id: int = exp.id
        self.out = Outcome()
        ss = s.get(SearcherState, self.exp_id)
        self.ss = ss if ss is not None else SearcherState(experiment_id=self.exp_id)
        self.searcher: Searcher = make_searcher(self.cfg.searcher, self.cfg.hyperparameters,
                                                self.cfg.experiment_seed)
        #: max_concurrent_trials the last tick ran with (None: first tick, or older snapshot)
        self.last_concurrency: int | None = None
        if self.ss.snapshot:
            self.searcher.restore(self.ss.snapshot)
            self.last_concurrency = self.ss.snapshot.get(CONCURRENCY_KEY)
        #: trial id -> live job id of the *quiet* trials (``quiet_job``): neither row is
        #: loaded this tick unless something asks for it (``live_job``,
        #: ``trial_of_request``); building 14,000 ORM objects for 7,000 pending jobs and
        #: their trials was half of a tick at 10,000 trials
        self.quiet: dict[int, int] = {}
        live_rows = list(map(LiveRow._make, s.exec(sa_select(  # type: ignore[call-overload]
            Job.id, Job.trial_id, Job.ref, Job.state, Job.restart_count, Job.unknown_ticks,
            Job.reason, Job.nodes, Trial.state, Trial.steps_completed, Trial.restarts,
            Trial.runs, Trial.stop_requested_at).join(
            Trial, col(Trial.id) == Job.trial_id).where(
            Job.experiment_id == self.exp_id, Job.live == True)).all()))  # noqa: E712
        if exp.state == ExperimentState.ACTIVE:
            quiet_rows = [row for row in live_rows
                          if quiet_job(row, infos.get(row.ref or ""), fast=fast)]
            self.quiet = {row.trial_id: row.job_id for row in quiet_rows}
            changed = new_reasons(quiet_rows, infos)
            if changed:
                table = Job.__table__  # type: ignore[attr-defined]
                s.execute(table.update().where(table.c.id == bindparam("jid"))  # type: ignore[call-overload]
                          .values(reason=bindparam("r")), changed)
        # the open trials and those with a live job: an ended trial is read only when
        # asked for (``trial_of_request``); hparams and validate_at only when a trial is
        # promoted (decoding every trial's JSON was a third of a tick at 10,000 trials)
        live_trials = select(Job.trial_id).where(Job.experiment_id == self.exp_id,
                                                 Job.live == True)  # noqa: E712
        wanted = [i for i in s.exec(select(Trial.id).where(
            Trial.experiment_id == self.exp_id,
            col(Trial.state).not_in(TERMINAL_TRIAL_STATES) | col(Trial.id).in_(live_trials)))
            if i is not None and i not in self.quiet]
        self.trials: dict[int, Trial] = {}
        for chunk in _chunks(wanted):
            for t in s.exec(select(Trial).where(col(Trial.id).in_(chunk)).options(
                    defer(Trial.hparams),  # type: ignore[arg-type]
                    defer(Trial.validate_at))):  # type: ignore[arg-type]
                if t.id is not None:
                    self.trials[t.id] = t
        self.by_request = {t.request_id: t for t in self.trials.values()}
        #: every trial's request id (the ended ones are not in ``trials``)
        self.requests: set[int] = set(s.exec(select(Trial.request_id).where(
            Trial.experiment_id == self.exp_id)))
        loud = [row.job_id for row in live_rows if row.trial_id not in self.quiet]
        self.jobs = [j for chunk in _chunks(loud)
                     for j in s.exec(select(Job).where(col(Job.id).in_(chunk)))]
        #: the live job of each trial (at most one); kept in step by close_job
        self.live: dict[int, Job] = {j.trial_id: j for j in self.jobs}
        #: the jobs above by trial (an exit record looks its job up here: scanning
        #: every job per record made a tick that ingests many exits quadratic)
        self.jobs_of: dict[int, list[Job]] = {}
        for j in self.jobs:
            self.jobs_of.setdefault(j.trial_id, []).append(j)
        #: each job's newest exit record, read this tick (ingest)
        self.records: dict[int, ExitRecord] = {}
        self.new_checkpoints = False
        #: ingest offsets of the trials open when first needed (``offset``)
        self._offsets: dict[tuple[int, str], IngestOffset] | None = None
        self._offsets_of: set[int] = set()
        #: the trials among those with an offset row (something was ingested)
        self._ingested: set[int] = set()

    # ------------------------------------------------------------------ driver
    def run(self) -> Outcome:
        state = self.exp.state
        if not self.ss.initialized and state == ExperimentState.ACTIVE:
            self.ss.initialized = True
            self.feed(replay.initial())
        for job in self.jobs:
            self.observe_job(job)
        for trial in list(self.trials.values()):
            if (not trial.state.is_terminal or self.live_job(trial) is not None) \
                    and not self.unwritten(trial):
                self.ingest(trial)
        for job in self.jobs:
            if job.live:
                self.carry_out(job, self.judge(job))
        concurrency = self.cfg.searcher.max_concurrent_trials
        if state == ExperimentState.ACTIVE and self.last_concurrency not in (None, concurrency):
            self.feed(replay.top_up())  # set-concurrency changed the limit
        self.enact_experiment_state()
        self.stop_overdue()
        self.finish_if_done()
        self.collect_garbage(full=self.new_checkpoints or self.out.changed)
        self.exp.progress = self.searcher.progress()
        self.ss.snapshot = {**self.searcher.snapshot(), CONCURRENCY_KEY: concurrency}
        self.s.add(self.ss)
        self.s.add(self.exp)
        return self.out

    def run_fast(self, trial_ids: set[int]) -> Outcome:
        """The file-driven share of a tick (``Daemon.fast_tick``), between two polls of
        the backend: ingest the metrics of ``trial_ids`` (whose metrics.jsonl grew) and
        feed the searcher, so a rung's ``Stop`` writes the stop file at once. It judges
        no job (that needs the poll's states; ``run`` does it next tick) and cancels
        nothing on a timer (``stop_overdue`` stays with ``run``); without a poll, a stop
        writes the stop file even for a job still pending (``seen_pending``)."""
        if self.exp.state != ExperimentState.ACTIVE or not self.ss.initialized:
            return self.out
        for trial_id in sorted(trial_ids):
            trial = self.trials.get(trial_id)
            if trial is not None and self.live_job(trial) is not None:
                self.ingest(trial, exits=False)
        self.collect_garbage(full=self.new_checkpoints or self.out.changed)
        self.exp.progress = self.searcher.progress()
        self.ss.snapshot = {**self.searcher.snapshot(),
                            CONCURRENCY_KEY: self.cfg.searcher.max_concurrent_trials}
        self.s.add(self.ss)
        self.s.add(self.exp)
        return self.out

    # ------------------------------------------------------------------ helpers
    def event(self, kind: str, message: str, trial: Trial | None = None) -> None:
        self.s.add(Event(experiment_id=self.exp_id, trial_id=trial.id if trial else None,
                         kind=kind, message=message, time=self.now))
        self.out.changed = True

    def tpaths(self, trial: Trial) -> TrialPaths:
        assert trial.id is not None
        return self.paths.trial(trial.id)

    def is_open(self, trial_id: int) -> bool:
        """The trial has not ended (an ended one may not be loaded: ``trials``; a quiet
        one is open)."""
        trial = self.trials.get(trial_id)
        return trial_id in self.quiet or (trial is not None and not trial.state.is_terminal)

    def live_job(self, trial: Trial) -> Job | None:
        if trial.id is None:
            return None
        if trial.id in self.quiet:
            self.wake(trial.id)
        return self.live.get(trial.id)

    def wake(self, trial_id: int) -> None:
        """Load a quiet trial's job (and the trial, unless loaded): something acts on it
        this tick (a searcher stop, a replayed request)."""
        job = self.s.get(Job, self.quiet.pop(trial_id))
        if job is None or not job.live:
            return
        self.jobs.append(job)
        self.live[trial_id] = job
        self.jobs_of.setdefault(trial_id, []).append(job)
        if trial_id not in self.trials:
            trial = self.s.get(Trial, trial_id)
            if trial is not None:
                self.trials[trial_id] = trial
                self.by_request[trial.request_id] = trial

    def close_job(self, job: Job) -> None:
        job.live = False
        if self.live.get(job.trial_id) is job:
            del self.live[job.trial_id]
        self.s.add(job)

    def set_state(self, trial: Trial, state: TrialState, reason: str = "") -> None:
        if trial.state == state:
            return
        trial.state = state
        if reason:
            trial.exit_reason = reason
        if state.is_terminal or state in (TrialState.PAUSED, TrialState.WAITING):
            trial.ended_at = self.now
        self.s.add(trial)
        self.out.changed = True

    # ------------------------------------------------------------------ observe
    def observe_job(self, job: Job) -> None:
        if job.ref is None:
            return
        info = self.infos.get(job.ref)
        if info is None:
            return
        unknown = job.unknown_ticks + 1 if info.state == JobState.UNKNOWN else 0
        if unknown != job.unknown_ticks:
            job.unknown_ticks = unknown
            self.s.add(job)
        if info.state != JobState.UNKNOWN and job.reason != info.reason:
            job.reason = info.reason  # e.g. the pending reason describe shows
            self.s.add(job)
        if job.state != info.state or job.nodes != info.nodes:
            job.state, job.raw_state = info.state, info.raw_state
            job.nodes = info.nodes or job.nodes
            self.s.add(job)
            trial = self.trials.get(job.trial_id)
            if trial is not None and not trial.state.is_terminal:
                if info.state == JobState.RUNNING:
                    self.set_state(trial, TrialState.RUNNING)
                elif info.state == JobState.PENDING and trial.state == TrialState.RUNNING:
                    self.set_state(trial, TrialState.QUEUED)

    # ------------------------------------------------------------------ ingest
    def offset(self, trial: Trial, name: str) -> IngestOffset | None:
        """The stored offset row of one file of ``trial`` (None: nothing ingested yet).
        The rows of every open trial come in one query on first use (a lookup per
        trial and file was most of a tick at thousands of trials); a trial that was
        not open then (ended, with a live job) is looked up alone."""
        assert trial.id is not None
        if self._offsets is None:
            self._offsets = {(o.trial_id, o.file): o for o in self.s.exec(
                select(IngestOffset).join(Trial, col(Trial.id) == IngestOffset.trial_id)
                .where(Trial.experiment_id == self.exp_id,
                       col(Trial.state).not_in(TERMINAL_TRIAL_STATES)))}
            self._offsets_of = {t.id for t in self.trials.values()
                                if t.id is not None and not t.state.is_terminal}
            self._ingested = {trial_id for trial_id, _ in self._offsets}
        if trial.id in self._offsets_of:
            return self._offsets.get((trial.id, name))
        return self.s.get(IngestOffset, (trial.id, name))

    def unwritten(self, trial: Trial) -> bool:
        """``nothing_written_yet`` for ``trial``: its live job as this tick's poll saw it,
        and whether anything of it was ever ingested."""
        job = self.live_job(trial)
        info = self.infos.get(job.ref) if job is not None and job.ref else None
        if info is None or trial.id is None:
            return False
        self.offset(trial, "metrics.jsonl")  # loads the open trials' rows once
        ingested = (trial.id not in self._offsets_of or trial.id in self._ingested
                    or trial.steps_completed > 0 or trial.restarts > 0 or trial.runs > 0)
        return nothing_written_yet(info.state, info.restart_count, ingested=ingested)

    def ingest(self, trial: Trial, *, exits: bool = True) -> None:
        tp = self.tpaths(trial)
        files: list[tuple[str, Path, Callable[[Trial, dict[str, Any]], None]]] = [
            ("metrics.jsonl", tp.metrics, self.on_metric_record)]
        if exits:
            files.append(("exits.jsonl", tp.exit_log, self.on_exit_record))
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
            self.s.add(row)

    def on_metric_record(self, trial: Trial, rec: dict[str, Any]) -> None:
        kind, steps = rec.get("kind"), int(rec.get("steps") or 0)
        assert trial.id is not None
        if kind in ("training", "validation"):
            metrics = rec.get("metrics") or {}
            self.s.add(Metric(trial_id=trial.id, kind=str(kind), steps=steps,
                              metrics=dict(metrics),
                              time=float(rec.get("time") or self.now)))
            trial.steps_completed = max(trial.steps_completed, steps)
            self.s.add(trial)
            if kind == "validation":
                self.on_validation(trial, steps, metrics)
        elif kind == "checkpoint" and rec.get("uuid"):
            self.on_checkpoint(trial, steps, rec)

    def on_validation(self, trial: Trial, steps: int, metrics: dict[str, Any]) -> None:
        value = metric_value(metrics, self.cfg.searcher.metric)
        if value is None:
            self.event("warning", f"validation at {steps} lacks a numeric "
                       f"{self.cfg.searcher.metric!r}", trial)
            return
        trial.latest_validation = value
        sib = self.cfg.searcher.smaller_is_better
        if trial.best_validation is None or (value < trial.best_validation if sib
                                             else value > trial.best_validation):
            trial.best_validation = value
        for ck in self.s.exec(select(Checkpoint).where(Checkpoint.trial_id == trial.id,
                                                       Checkpoint.steps_completed == steps)):
            ck.validation_metric = value
            self.s.add(ck)
        self.s.add(trial)
        self.out.changed = True
        if not trial.state.is_terminal:
            self.feed(replay.validation(trial.request_id, value, steps), trial)

    def on_checkpoint(self, trial: Trial, steps: int, rec: dict[str, Any]) -> None:
        assert trial.id is not None
        uuid = str(rec["uuid"])
        if self.s.get(Checkpoint, uuid) is not None:
            return
        metric = self.s.exec(select(Metric).where(
            Metric.trial_id == trial.id, Metric.kind == "validation",
            Metric.steps == steps)).first()
        value = metric_value(metric.metrics, self.cfg.searcher.metric) if metric else None
        path = checkpoint_dir(self.cfg, Path(self.exp.run_dir), self.exp_id, trial.id) / uuid
        self.s.add(Checkpoint(uuid=uuid, experiment_id=self.exp_id, trial_id=trial.id,
                              steps_completed=steps, path=str(path),
                              meta=dict(rec.get("metadata") or {}),
                              validation_metric=value,
                              created_at=float(rec.get("time") or self.now)))
        trial.latest_checkpoint = uuid
        # a checkpoint at step N is N steps done, metrics reported or not (a bash loop
        # may only checkpoint: `dethpc report checkpoint --step N`)
        trial.steps_completed = max(trial.steps_completed, steps)
        self.s.add(trial)
        self.new_checkpoints = True

    def on_exit_record(self, trial: Trial, raw: dict[str, Any]) -> None:
        rec = parse_exit_record(raw)
        ref = str(raw.get("job", ""))
        candidates = self.jobs_of.get(trial.id, []) if trial.id is not None else []
        job = next((j for j in candidates if j.ref == ref), None)
        if job is None:
            job = max(candidates, key=lambda j: j.id or 0, default=None)
        if job is None:
            return
        job.exit_reason, job.exit_code, job.exit_run = rec.reason, rec.code, rec.run
        self.s.add(job)
        if rec.free:
            trial.runs += 1
            self.s.add(trial)
            self.event(rec.reason.value, f"trial checkpointed at step {trial.steps_completed} "
                       f"after {rec.signal or 'a signal'}; requeued (not counted)", trial)

    # ------------------------------------------------------------------ job ends
    def judge(self, job: Job) -> Decision:
        """Gather the facts of one live job and ask ``dethpc.control.job_end.judge``."""
        info = self.infos.get(job.ref or "")
        if nothing_to_judge(job.restart_count, info):
            return WAIT
        trial = self.trials[job.trial_id]
        last = (ExitRecord(job.exit_reason, job.exit_code or 0, job.exit_run)
                if job.exit_reason is not None and job.exit_run >= 0 else None)
        grew = info is not None and info.restart_count > job.restart_count
        kind = self.exp.kind
        facts = JobFacts(restart_count=job.restart_count, unknown_ticks=job.unknown_ticks,
                         last_record=last,
                         free_runs=self.free_runs(trial, job.ref or "") if grew else frozenset(),
                         wrapped=kind.wrapped)
        return judge(facts, TrialFacts(
            terminal=trial.state.is_terminal, stop_requested=trial.stop_requested_at is not None,
            killing=self.exp.state == ExperimentState.STOPPING_KILLED,
            restarts=trial.restarts, max_restarts=self.cfg.max_restarts,
            resubmittable=kind.daemon_submits), info)

    def free_runs(self, trial: Trial, ref: str) -> frozenset[int]:
        """Runs of job ``ref`` that ended with a free exit record (exits.jsonl; the
        job row keeps only the last record, and one tick may see several runs end)."""
        chunk = read_new_lines(self.tpaths(trial).exit_log, 0)
        return frozenset(rec.run for raw, rec in
                         ((r, parse_exit_record(r)) for r in chunk.records)
                         if str(raw.get("job", "")) == ref and rec.free)

    def carry_out(self, job: Job, d: Decision) -> None:
        if d.kind == Kind.WAIT:
            return
        info = self.infos[job.ref or ""]
        trial = self.trials[job.trial_id]
        self.count_runs(trial, d)
        job.restart_count = d.restart_count
        self.s.add(job)
        if d.kind == Kind.ENDED:
            job.ended_at, job.exit_reason = self.now, d.reason
            job.exit_code = info.exit_code if job.exit_code is None else job.exit_code
            job.unknown_ticks = 0
            self.close_job(job)
        elif d.cancel and job.ref:
            self.out.cancel.append(job.ref)
        if d.kind == Kind.REQUEUED and not self.exp.kind.wrapped:
            trial.runs += 1
            self.event("requeued", f"job {job.ref} was requeued by Slurm (run "
                       f"{d.restart_count}); not counted: a job dethpc did not submit "
                       "leaves no exit record, its own --requeue decided", trial)
        self.apply_verdict(trial, d, info)
        self.s.add(trial)

    def count_runs(self, trial: Trial, d: Decision) -> None:
        for run in d.counted_runs:
            trial.restarts += 1
            trial.runs += 1
            why = (f"run {run} ended without a checkpointed exit (node failure or kill)"
                   if d.kind == Kind.REQUEUED or run != d.restart_count
                   else f"{d.reason.value if d.reason else 'error'}")
            self.event("restart", f"{why}; restart {trial.restarts} of "
                       f"{self.cfg.max_restarts}", trial)

    def apply_verdict(self, trial: Trial, d: Decision, info: JobInfo) -> None:
        state = f"job state {info.raw_state or info.state.value}"
        reason = d.reason.value if d.reason else ""
        if d.verdict == Verdict.COMPLETE:
            waiting = trial.target_length < self.full_length()
            self.set_state(trial, TrialState.WAITING if waiting else TrialState.COMPLETED,
                           reason)
            self.feed(replay.exited(trial.request_id, "completed"), trial)
        elif d.verdict == Verdict.STOPPED:
            self.trial_stopped(trial)
        elif d.verdict == Verdict.KILLED:
            self.set_state(trial, TrialState.CANCELED, "killed")
        elif d.verdict == Verdict.RESUBMIT:
            trial.needs_job = True
            self.set_state(trial, TrialState.QUEUED, reason)
            self.event("resubmit", f"job ended {info.raw_state or info.state.value} after "
                       f"{reason}; resubmitting (not counted)", trial)
        elif d.verdict == Verdict.RESTART:
            trial.needs_job = True
            self.set_state(trial, TrialState.QUEUED, reason)
            self.event("requeue", f"{reason} ({state}); resubmitting from the latest "
                       "checkpoint", trial)
        elif d.verdict == Verdict.FAIL and d.kind == Kind.ENDED \
                and not self.exp.kind.daemon_submits:
            self.fail(trial, f"job ended {info.raw_state or info.state.value} ({reason}, exit "
                      f"code {info.exit_code}); {NOT_RESUBMITTED[self.exp.kind]}")
        elif d.verdict == Verdict.FAIL:
            what = reason or "run ended without a checkpointed exit"
            self.fail(trial, f"{what} ({state}, exit code {info.exit_code}); failed "
                      f"{trial.restarts} times, max_restarts={self.cfg.max_restarts}")

    def trial_stopped(self, trial: Trial) -> None:
        why = trial.stop_reason or StopReason.STOP
        trial.stop_requested_at = None
        if why == StopReason.PAUSE:
            self.set_state(trial, TrialState.PAUSED, "paused")
            return
        cancel = why == StopReason.CANCEL
        self.set_state(trial, TrialState.CANCELED if cancel else TrialState.STOPPED,
                       "canceled" if cancel else "stopped by the searcher")
        self.feed(replay.exited(trial.request_id, "stopped"), trial)

    def fail(self, trial: Trial, message: str) -> None:
        trial.needs_job = False
        self.set_state(trial, TrialState.ERROR, message)
        self.event("error", message, trial)
        self.feed(replay.exited(trial.request_id, "errored"), trial)

    def full_length(self) -> int:
        ml = self.cfg.searcher.max_length
        return ml.value if ml is not None else 0

    # ------------------------------------------------------------------ actions
    def feed(self, call: replay.SearcherCall, trial: Trial | None = None) -> None:
        """Make one searcher call and apply its actions; the call is recorded as an
        event in this transaction, so replaying the events into a fresh searcher gives
        the same decisions (``dethpc.searchers.replay``)."""
        self.event(replay.EVENT_KIND, replay.format_call(call), trial)
        self.apply(replay.invoke(self.searcher, call))

    def apply(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, Create):
                self.create(action)
            elif isinstance(action, Continue):
                self.resume(action)
            elif isinstance(action, Stop):
                trial = self.trial_of_request(action.request_id)
                if trial is not None:
                    self.request_stop(trial, StopReason.STOP)
            elif isinstance(action, Shutdown):
                self.ss.shutdown = True
                self.s.add(self.ss)

    def trial_of_request(self, request_id: int) -> Trial | None:
        """The trial of a searcher request, an ended one read from the store on demand."""
        trial = self.by_request.get(request_id)
        if trial is None and request_id in self.requests:
            trial = self.s.exec(select(Trial).where(Trial.experiment_id == self.exp_id,
                                                    Trial.request_id == request_id)).first()
            if trial is not None and trial.id is not None:
                self.trials[trial.id] = trial
                self.by_request[request_id] = trial
                if trial.id in self.quiet:
                    self.wake(trial.id)
        return trial

    def create(self, action: Create) -> None:
        if action.request_id in self.requests:
            return
        trial = Trial(experiment_id=self.exp_id, request_id=action.request_id,
                      hparams=dict(action.hparams), target_length=action.length,
                      validate_at=list(action.validate_at), needs_job=True)
        self.s.add(trial)
        self.s.flush()
        assert trial.id is not None
        self.trials[trial.id] = trial
        self.by_request[trial.request_id] = trial
        self.requests.add(trial.request_id)
        self.event("trial_created", f"trial {trial.id} created (request {action.request_id})",
                   trial)

    def resume(self, action: Continue) -> None:
        trial = self.trial_of_request(action.request_id)
        if trial is None:
            return
        trial.target_length = action.length
        trial.validate_at = list(action.validate_at)
        trial.needs_job = True
        trial.ended_at = None
        self.set_state(trial, TrialState.QUEUED, "promoted")
        self.event("promoted", f"trial {trial.id} promoted to length {action.length}", trial)

    def request_stop(self, trial: Trial, why: StopReason) -> None:
        """Ask a trial to checkpoint and exit; a trial not yet running just stops."""
        if trial.state.is_terminal or trial.state == TrialState.PAUSED:
            return
        job = self.live_job(trial)
        trial.stop_reason = why
        trial.needs_job = False
        if job is None or trial.state == TrialState.WAITING:
            self.trial_stopped(trial)
        elif self.seen_pending(trial, job):
            self.out.cancel.append(job.ref or "")
            job.cancel_due = True   # the daemon clears it once scancel has gone through
            self.close_job(job)
            self.trial_stopped(trial)
        elif trial.stop_requested_at is None:
            tp = self.tpaths(trial)
            tp.root.mkdir(parents=True, exist_ok=True)
            tp.stop.write_text(why.value if why == StopReason.PAUSE else StopReason.STOP.value)
            trial.stop_requested_at = self.now
            self.event("stop_requested", f"{why.value}: asked trial {trial.id} to checkpoint "
                       "and exit", trial)
        self.s.add(trial)

    def seen_pending(self, trial: Trial, job: Job) -> bool:
        """This tick's poll saw ``job`` pending (never requeued, nothing trained yet): a
        stop may cancel it instead of asking it to exit. Not the stored state: that is
        the last answering poll's, stale when this poll could not tell (Slurm's
        accounting down, or a tick between polls) -- the job may have run meanwhile
        (a multi-fault run saw a job that ran to its end while the daemon was down
        cancelled and closed as pending, its later validations never fed)."""
        info = self.infos.get(job.ref) if job.ref else None
        return (info is not None and info.state == JobState.PENDING
                and info.restart_count == 0 and job.restart_count == 0
                and trial.steps_completed == 0)

    def stop_overdue(self) -> None:
        grace = self.cfg.searcher.stop_grace_s
        for trial in self.trials.values():
            if trial.stop_requested_at is None or self.now - trial.stop_requested_at <= grace:
                continue
            job = self.live_job(trial)
            if job is not None and job.ref and job.ref not in self.out.cancel:
                self.out.cancel.append(job.ref)
                self.event("stop_timeout", f"trial {trial.id} did not exit within {grace}s of "
                           "the stop request; cancelling its job", trial)

    # ------------------------------------------------------------------ experiment
    def enact_experiment_state(self) -> None:
        state = self.exp.state
        active = [t for t in self.trials.values() if not t.state.is_terminal]
        if state == ExperimentState.PAUSED:
            for t in active:
                self.request_stop(t, StopReason.PAUSE)
        elif state == ExperimentState.ACTIVE:
            for t in active:
                if t.state == TrialState.PAUSED:
                    self.tpaths(t).stop.unlink(missing_ok=True)
                    t.stop_reason, t.needs_job = None, True
                    self.set_state(t, TrialState.QUEUED, "activated")
        elif state == ExperimentState.STOPPING_CANCELED:
            for t in active:
                if t.state == TrialState.PAUSED:
                    self.set_state(t, TrialState.CANCELED, "canceled")
                else:
                    self.request_stop(t, StopReason.CANCEL)
        elif state == ExperimentState.STOPPING_KILLED:
            for job in self.live.values():
                if job.ref and job.ref not in self.out.cancel:
                    self.out.cancel.append(job.ref)
            for t in active:
                if self.live_job(t) is None:
                    t.needs_job = False
                    self.set_state(t, TrialState.CANCELED, "killed")

    def finish_if_done(self) -> None:
        state = self.exp.state
        open_trials = [t for t in self.trials.values()
                       if not t.state.is_terminal and t.state != TrialState.WAITING]
        if state in (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED):
            if not self.live:
                for t in self.trials.values():
                    if not t.state.is_terminal:
                        self.set_state(t, TrialState.CANCELED, "canceled")
                self.end(ExperimentState.CANCELED)
        elif state == ExperimentState.ACTIVE and self.ss.shutdown and not open_trials \
                and not self.quiet:
            for t in self.trials.values():
                if t.state == TrialState.WAITING:
                    self.set_state(t, TrialState.COMPLETED, "search ended")
            ok = self.s.exec(select(Trial.id).where(
                Trial.experiment_id == self.exp_id,
                col(Trial.state).in_([TrialState.COMPLETED, TrialState.STOPPED]))).first() \
                is not None
            self.end(ExperimentState.COMPLETED if ok else ExperimentState.ERROR)

    def end(self, state: ExperimentState) -> None:
        self.exp.state = state
        self.exp.ended_at = self.now
        self.event("ended", f"experiment {state.value.lower()}")

    # ------------------------------------------------------------------ GC
    def collect_garbage(self, *, full: bool) -> None:
        """Mark what the policy drops as DELETING; the daemon removes the files after
        this transaction commits and then marks them DELETED. Rows left DELETING by a
        daemon that died in between are handed out again every tick."""
        for c in self.s.exec(select(Checkpoint).where(
                Checkpoint.experiment_id == self.exp_id,
                Checkpoint.state == CheckpointState.DELETING)):
            self.out.delete[c.uuid] = c.path
        if not full:
            return
        cs = self.cfg.checkpoint_storage
        rows = list(self.s.exec(select(Checkpoint).where(
            Checkpoint.experiment_id == self.exp_id,
            Checkpoint.state == CheckpointState.COMPLETED)))
        infos = [CkptInfo(c.uuid, c.trial_id, c.steps_completed, c.created_at,
                          c.validation_metric, self.is_open(c.trial_id)) for c in rows]
        doomed = to_delete(infos, save_experiment_best=cs.save_experiment_best,
                           save_trial_best=cs.save_trial_best,
                           save_trial_latest=cs.save_trial_latest,
                           smaller_is_better=self.cfg.searcher.smaller_is_better)
        for c in rows:
            if c.uuid in doomed:
                c.state = CheckpointState.DELETING
                self.s.add(c)
                self.out.delete[c.uuid] = c.path
