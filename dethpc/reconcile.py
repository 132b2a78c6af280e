"""One experiment's share of a daemon tick, inside one database transaction.

Owns: recording the polled job states, ingesting the trial files (metrics,
checkpoints, exit records), deciding what a job's end means for its trial
(complete, stop, pause, requeue for free, restart counted against
``max_restarts``, error), feeding the searcher, applying its actions, enacting
pause/cancel/kill, completing the experiment and checkpoint GC.
Must not: call a backend. It returns the refs to cancel; the daemon batches
them with every other experiment's into one call.

Idempotency: offsets, rows and the searcher snapshot commit together, so a
daemon killed mid-tick re-reads the same lines and makes the same decisions.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlmodel import Session, select

from dethpc.backends.base import JobInfo, JobState
from dethpc.config import parse_experiment_config
from dethpc.config.model import ExperimentConfig
from dethpc.exitcodes import ExitReason
from dethpc.gc import CkptInfo, to_delete
from dethpc.ingest import metric_value, read_new_lines
from dethpc.jobscript import checkpoint_dir
from dethpc.paths import ExperimentPaths, TrialPaths
from dethpc.searchers.base import Continue, Create, Searcher, Shutdown, Stop
from dethpc.searchers.factory import make_searcher
from dethpc.store.models import (
    Checkpoint,
    Event,
    Experiment,
    ExperimentState,
    IngestOffset,
    Job,
    Metric,
    SearcherState,
    Trial,
    TrialState,
)

log = logging.getLogger(__name__)
FREE_REASONS = {ExitReason.PREEMPTED.value, ExitReason.TIME_LIMIT.value,
                ExitReason.REQUEUED.value}
#: ticks a job may be unknown to the backend before it is declared lost
UNKNOWN_TICKS = 3


@dataclass
class Outcome:
    cancel: list[str] = field(default_factory=list)
    changed: bool = False


#: the limit a snapshot was taken under, so a change (set-concurrency) is seen once
CONCURRENCY_KEY = "_max_concurrent_trials"


def load_config(exp: Experiment) -> ExperimentConfig:
    import yaml

    return parse_experiment_config(yaml.safe_load(exp.config_yaml) or {})


class ExperimentReconciler:
    """Reconciles one experiment; construct per tick, call ``run``."""

    def __init__(self, s: Session, exp: Experiment, infos: dict[str, JobInfo],
                 unknown_counts: dict[str, int], now: float) -> None:
        self.s, self.exp, self.infos, self.now = s, exp, infos, now
        self.unknown = unknown_counts
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
        if self.ss.snapshot_json not in ("", "{}"):
            snapshot = json.loads(self.ss.snapshot_json)
            self.searcher.restore(snapshot)
            self.last_concurrency = snapshot.get(CONCURRENCY_KEY)
        self.trials: dict[int, Trial] = {
            t.id: t for t in s.exec(select(Trial).where(Trial.experiment_id == self.exp_id))
            if t.id is not None}
        self.by_request = {t.request_id: t for t in self.trials.values()}
        self.jobs = list(s.exec(select(Job).where(Job.experiment_id == self.exp_id,
                                                  Job.live == True)))  # noqa: E712
        self.new_checkpoints = False

    # ------------------------------------------------------------------ driver
    def run(self) -> Outcome:
        state = ExperimentState(self.exp.state)
        if not self.ss.initialized and state == ExperimentState.ACTIVE:
            self.ss.initialized = True
            self.apply(self.searcher.initial())
        for job in self.jobs:
            self.observe_job(job)
        for trial in list(self.trials.values()):
            if not TrialState(trial.state).is_terminal or self.live_job(trial) is not None:
                self.ingest(trial)
        for job in self.jobs:
            if job.live:
                self.handle_restarts(job)
                self.handle_end(job)
        concurrency = self.cfg.searcher.max_concurrent_trials
        if state == ExperimentState.ACTIVE and self.last_concurrency not in (None, concurrency):
            self.apply(self.searcher.top_up())  # set-concurrency changed the limit
        self.enact_experiment_state()
        self.stop_overdue()
        self.finish_if_done()
        if self.new_checkpoints or self.out.changed:
            self.collect_garbage()
        self.exp.progress = self.searcher.progress()
        self.ss.snapshot_json = json.dumps({**self.searcher.snapshot(),
                                            CONCURRENCY_KEY: concurrency})
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

    def live_job(self, trial: Trial) -> Job | None:
        for job in self.jobs:
            if job.live and job.trial_id == trial.id:
                return job
        return None

    def set_state(self, trial: Trial, state: TrialState, reason: str = "") -> None:
        if trial.state == state.value:
            return
        trial.state = state.value
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
        if info.state == JobState.UNKNOWN:
            self.unknown[job.ref] = self.unknown.get(job.ref, 0) + 1
        else:
            self.unknown.pop(job.ref, None)
        if job.state != info.state.value or job.nodes != info.nodes:
            job.state, job.raw_state = info.state.value, info.raw_state
            job.nodes = info.nodes or job.nodes
            self.s.add(job)
            trial = self.trials.get(job.trial_id)
            if trial is not None and not TrialState(trial.state).is_terminal:
                if info.state == JobState.RUNNING:
                    self.set_state(trial, TrialState.RUNNING)
                elif info.state == JobState.PENDING and trial.state == TrialState.RUNNING:
                    self.set_state(trial, TrialState.QUEUED)

    # ------------------------------------------------------------------ ingest
    def offset(self, trial: Trial, name: str) -> IngestOffset:
        assert trial.id is not None
        row = self.s.get(IngestOffset, (trial.id, name))
        return row if row is not None else IngestOffset(trial_id=trial.id, file=name, offset=0)

    def ingest(self, trial: Trial) -> None:
        tp = self.tpaths(trial)
        for name, path, handler in (("metrics.jsonl", tp.metrics, self.on_metric_record),
                                    ("exits.jsonl", tp.exit_log, self.on_exit_record)):
            row = self.offset(trial, name)
            chunk = read_new_lines(path, row.offset)
            if chunk.new_offset == row.offset:
                continue
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
                              metrics_json=json.dumps(metrics),
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
        if not TrialState(trial.state).is_terminal:
            self.apply(self.searcher.on_validation(trial.request_id, value, steps))

    def on_checkpoint(self, trial: Trial, steps: int, rec: dict[str, Any]) -> None:
        assert trial.id is not None
        uuid = str(rec["uuid"])
        if self.s.get(Checkpoint, uuid) is not None:
            return
        metric = self.s.exec(select(Metric).where(
            Metric.trial_id == trial.id, Metric.kind == "validation",
            Metric.steps == steps)).first()
        value = (metric_value(json.loads(metric.metrics_json), self.cfg.searcher.metric)
                 if metric else None)
        path = checkpoint_dir(self.cfg, Path(self.exp.run_dir), self.exp_id, trial.id) / uuid
        self.s.add(Checkpoint(uuid=uuid, experiment_id=self.exp_id, trial_id=trial.id,
                              steps_completed=steps, path=str(path),
                              metadata_json=json.dumps(rec.get("metadata") or {}),
                              validation_metric=value,
                              created_at=float(rec.get("time") or self.now)))
        trial.latest_checkpoint = uuid
        self.s.add(trial)
        self.new_checkpoints = True

    def on_exit_record(self, trial: Trial, rec: dict[str, Any]) -> None:
        ref = str(rec.get("job", ""))
        candidates = [j for j in self.jobs if j.trial_id == trial.id]
        job = next((j for j in candidates if j.ref == ref), None)
        if job is None:
            job = max(candidates, key=lambda j: j.id or 0, default=None)
        if job is None:
            return
        job.exit_reason = str(rec.get("reason", ""))
        job.exit_code = int(rec.get("code", 0))
        job.exit_run = int(rec.get("restart", 0))
        self.s.add(job)
        if job.exit_reason in FREE_REASONS:
            trial.runs += 1
            self.s.add(trial)
            self.event(job.exit_reason, f"trial checkpointed at step {trial.steps_completed} "
                       f"after {rec.get('signal') or 'a signal'}; requeued (not counted)", trial)

    # ------------------------------------------------------------------ job ends
    def handle_restarts(self, job: Job) -> None:
        """Slurm requeued the job (same id, SLURM_RESTART_COUNT+1). A run that ended
        without a checkpointed exit record died (node failure, kill): count it."""
        info = self.infos.get(job.ref or "")
        if info is None or info.restart_count <= job.restart_count:
            return
        if info.raw_state in ("COMPLETING", "CG"):
            # Slurm counts the requeue at once, while the old run's batch shell may still
            # be writing its exit record (KillWait): judge the run once it has ended.
            return
        trial = self.trials[job.trial_id]
        free = self.free_runs(trial, job.ref or "")
        for run in range(job.restart_count, info.restart_count):
            if run not in free:
                trial.restarts += 1
                trial.runs += 1
                self.event("restart", f"run {run} ended without a checkpointed exit "
                           f"(node failure or kill); restart {trial.restarts} of "
                           f"{self.cfg.max_restarts}", trial)
        job.restart_count = info.restart_count
        self.s.add(job)
        self.s.add(trial)
        if trial.restarts > self.cfg.max_restarts and not TrialState(trial.state).is_terminal:
            self.out.cancel.append(job.ref or "")
            self.fail(trial, f"failed {trial.restarts} times (max_restarts="
                      f"{self.cfg.max_restarts})")

    def free_runs(self, trial: Trial, ref: str) -> set[int]:
        """Runs of job ``ref`` that ended with a free exit record (exits.jsonl; the
        job row keeps only the last record, and one tick may see several runs end)."""
        chunk = read_new_lines(self.tpaths(trial).exit_log, 0)
        return {int(r.get("restart", -1)) for r in chunk.records
                if str(r.get("job", "")) == ref and r.get("reason") in FREE_REASONS}

    def end_reason(self, job: Job, info: JobInfo) -> str:
        if job.exit_reason and job.exit_run == info.restart_count:
            return job.exit_reason
        return {
            JobState.CANCELLED: ExitReason.CANCELLED, JobState.NODE_FAIL: ExitReason.NODE_FAIL,
            JobState.PREEMPTED: ExitReason.PREEMPTED, JobState.UNKNOWN: ExitReason.NODE_FAIL,
        }.get(info.state, ExitReason.ERROR).value

    def handle_end(self, job: Job) -> None:
        info = self.infos.get(job.ref or "")
        if info is None or not info.state.is_terminal:
            return
        if info.state == JobState.UNKNOWN and self.unknown.get(job.ref or "", 0) < UNKNOWN_TICKS:
            return
        reason = self.end_reason(job, info)
        job.live, job.ended_at, job.exit_reason = False, self.now, reason
        job.exit_code = info.exit_code if job.exit_code is None else job.exit_code
        self.s.add(job)
        self.unknown.pop(job.ref or "", None)
        trial = self.trials[job.trial_id]
        if TrialState(trial.state).is_terminal:
            return
        self.trial_job_ended(trial, reason, info)

    def trial_job_ended(self, trial: Trial, reason: str, info: JobInfo) -> None:
        rid = trial.request_id
        if reason == ExitReason.COMPLETED.value:
            waiting = trial.target_length < self.full_length()
            self.set_state(trial, TrialState.WAITING if waiting else TrialState.COMPLETED,
                           reason)
            self.apply(self.searcher.on_exited(rid, "completed"))
        elif reason == ExitReason.STOPPED.value or trial.stop_requested_at is not None:
            self.trial_stopped(trial)
        elif ExperimentState(self.exp.state) == ExperimentState.STOPPING_KILLED:
            self.set_state(trial, TrialState.CANCELED, "killed")
        elif reason in FREE_REASONS:
            trial.needs_job = True
            self.set_state(trial, TrialState.QUEUED, reason)
            self.event("resubmit", f"job ended {info.raw_state or info.state.value} after "
                       f"{reason}; resubmitting (not counted)", trial)
        else:
            trial.restarts += 1
            trial.runs += 1
            if trial.restarts > self.cfg.max_restarts:
                self.fail(trial, f"{reason} (job state {info.raw_state or info.state.value}, "
                          f"exit code {info.exit_code}); max_restarts={self.cfg.max_restarts} "
                          "reached")
            else:
                trial.needs_job = True
                self.set_state(trial, TrialState.QUEUED, reason)
                self.event("restart", f"{reason} (job state {info.raw_state or info.state.value}"
                           f"); restart {trial.restarts} of {self.cfg.max_restarts} from the "
                           "latest checkpoint", trial)
        self.s.add(trial)

    def trial_stopped(self, trial: Trial) -> None:
        why = trial.stop_reason or "stop"
        trial.stop_requested_at = None
        if why == "pause":
            self.set_state(trial, TrialState.PAUSED, "paused")
            return
        self.set_state(trial, TrialState.CANCELED if why == "cancel" else TrialState.STOPPED,
                       "canceled" if why == "cancel" else "stopped by the searcher")
        self.apply(self.searcher.on_exited(trial.request_id, "stopped"))

    def fail(self, trial: Trial, message: str) -> None:
        trial.needs_job = False
        self.set_state(trial, TrialState.ERROR, message)
        self.event("error", message, trial)
        self.apply(self.searcher.on_exited(trial.request_id, "errored"))

    def full_length(self) -> int:
        ml = self.cfg.searcher.max_length
        return ml.value if ml is not None else 0

    # ------------------------------------------------------------------ actions
    def apply(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, Create):
                self.create(action)
            elif isinstance(action, Continue):
                self.resume(action)
            elif isinstance(action, Stop):
                trial = self.by_request.get(action.request_id)
                if trial is not None:
                    self.request_stop(trial, "stop")
            elif isinstance(action, Shutdown):
                self.ss.shutdown = True
                self.s.add(self.ss)

    def create(self, action: Create) -> None:
        if action.request_id in self.by_request:
            return
        trial = Trial(experiment_id=self.exp_id, request_id=action.request_id,
                      hparams_json=json.dumps(action.hparams), target_length=action.length,
                      validate_at_json=json.dumps(list(action.validate_at)), needs_job=True)
        self.s.add(trial)
        self.s.flush()
        assert trial.id is not None
        self.trials[trial.id] = trial
        self.by_request[trial.request_id] = trial
        self.event("trial_created", f"trial {trial.id} created (request {action.request_id})",
                   trial)

    def resume(self, action: Continue) -> None:
        trial = self.by_request.get(action.request_id)
        if trial is None:
            return
        trial.target_length = action.length
        trial.validate_at_json = json.dumps(list(action.validate_at))
        trial.needs_job = True
        trial.ended_at = None
        self.set_state(trial, TrialState.QUEUED, "promoted")
        self.event("promoted", f"trial {trial.id} promoted to length {action.length}", trial)

    def request_stop(self, trial: Trial, why: str) -> None:
        """Ask a trial to checkpoint and exit; a trial not yet running just stops."""
        if TrialState(trial.state).is_terminal or trial.state == TrialState.PAUSED:
            return
        job = self.live_job(trial)
        trial.stop_reason = why
        trial.needs_job = False
        if job is None or trial.state == TrialState.WAITING:
            self.trial_stopped(trial)
        elif job.state == JobState.PENDING.value and job.restart_count == 0:
            self.out.cancel.append(job.ref or "")
            job.live = False
            self.s.add(job)
            self.trial_stopped(trial)
        elif trial.stop_requested_at is None:
            tp = self.tpaths(trial)
            tp.root.mkdir(parents=True, exist_ok=True)
            tp.stop.write_text("pause" if why == "pause" else "stop")
            trial.stop_requested_at = self.now
            self.event("stop_requested", f"{why}: asked trial {trial.id} to checkpoint and exit",
                       trial)
        self.s.add(trial)

    def stop_overdue(self) -> None:
        grace = self.cfg.searcher.stop_grace_s
        for trial in self.trials.values():
            job = self.live_job(trial)
            if (trial.stop_requested_at is not None and job is not None and job.ref
                    and self.now - trial.stop_requested_at > grace
                    and job.ref not in self.out.cancel):
                self.out.cancel.append(job.ref)
                self.event("stop_timeout", f"trial {trial.id} did not exit within {grace}s of "
                           "the stop request; cancelling its job", trial)

    # ------------------------------------------------------------------ experiment
    def enact_experiment_state(self) -> None:
        state = ExperimentState(self.exp.state)
        active = [t for t in self.trials.values() if not TrialState(t.state).is_terminal]
        if state == ExperimentState.PAUSED:
            for t in active:
                self.request_stop(t, "pause")
        elif state == ExperimentState.ACTIVE:
            for t in active:
                if t.state == TrialState.PAUSED:
                    self.tpaths(t).stop.unlink(missing_ok=True)
                    t.stop_reason, t.needs_job = "", True
                    self.set_state(t, TrialState.QUEUED, "activated")
        elif state == ExperimentState.STOPPING_CANCELED:
            for t in active:
                if t.state == TrialState.PAUSED:
                    self.set_state(t, TrialState.CANCELED, "canceled")
                else:
                    self.request_stop(t, "cancel")
        elif state == ExperimentState.STOPPING_KILLED:
            for job in self.jobs:
                if job.live and job.ref and job.ref not in self.out.cancel:
                    self.out.cancel.append(job.ref)
            for t in active:
                if self.live_job(t) is None:
                    t.needs_job = False
                    self.set_state(t, TrialState.CANCELED, "killed")

    def finish_if_done(self) -> None:
        state = ExperimentState(self.exp.state)
        live = [j for j in self.jobs if j.live]
        open_trials = [t for t in self.trials.values()
                       if not TrialState(t.state).is_terminal and t.state != TrialState.WAITING]
        if state in (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED):
            if not live:
                for t in self.trials.values():
                    if not TrialState(t.state).is_terminal:
                        self.set_state(t, TrialState.CANCELED, "canceled")
                self.end(ExperimentState.CANCELED)
        elif state == ExperimentState.ACTIVE and self.ss.shutdown and not open_trials:
            for t in self.trials.values():
                if t.state == TrialState.WAITING:
                    self.set_state(t, TrialState.COMPLETED, "search ended")
            ok = any(t.state in (TrialState.COMPLETED, TrialState.STOPPED)
                     for t in self.trials.values())
            self.end(ExperimentState.COMPLETED if ok else ExperimentState.ERROR)

    def end(self, state: ExperimentState) -> None:
        self.exp.state = state.value
        self.exp.ended_at = self.now
        self.event("ended", f"experiment {state.value.lower()}")

    # ------------------------------------------------------------------ GC
    def collect_garbage(self) -> None:
        cs = self.cfg.checkpoint_storage
        rows = list(self.s.exec(select(Checkpoint).where(
            Checkpoint.experiment_id == self.exp_id, Checkpoint.state == "COMPLETED")))
        infos = [CkptInfo(c.uuid, c.trial_id, c.steps_completed, c.created_at,
                          c.validation_metric,
                          not TrialState(self.trials[c.trial_id].state).is_terminal)
                 for c in rows if c.trial_id in self.trials]
        doomed = to_delete(infos, save_experiment_best=cs.save_experiment_best,
                           save_trial_best=cs.save_trial_best,
                           save_trial_latest=cs.save_trial_latest,
                           smaller_is_better=self.cfg.searcher.smaller_is_better)
        for c in rows:
            if c.uuid in doomed:
                shutil.rmtree(c.path, ignore_errors=True)
                c.state = "DELETED"
                self.s.add(c)

