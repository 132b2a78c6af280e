"""Recording what a poll says of each live job, and carrying out how each job ended.

Owns: ``JobEnds`` -- a poll's news stored on the job row and its trial (``observe``),
the facts of one live job gathered for ``job_end.judge`` (``judge``: the runs with a
free exit record read from ``exits.jsonl``), and the decision carried out on the job
(closed, cancelled, its counted runs) and on the trial (its ``TrialChange``, settled
by the searcher driver).
Must not: decide (``job_end.judge``, ``job_rules``), write files or call a backend
(refs to cancel go to ``Outcome.cancel``).
Not to be confused with ``dethpc.control.job_end`` (the pure judgement of a job, which
this module asks) or ``dethpc.launch.run_end`` (inside the job: one run's end and its
exit record, which this module reads).
"""

from __future__ import annotations

from dataclasses import replace

from dethpc.backends.base import JobInfo
from dethpc.backends.slurm_holds import hold_of
from dethpc.common.jsonlines import read_new_lines
from dethpc.common.kinds import EventKind
from dethpc.config.model import ExperimentConfig
from dethpc.control.job_end import (
    WAIT,
    Decision,
    ExitRecord,
    JobFacts,
    Kind,
    TrialFacts,
    judge,
    nothing_to_judge,
    runs_ended_since,
)
from dethpc.control.reconcile.ingest_rules import free_runs
from dethpc.control.reconcile.job_rules import (
    EndFacts,
    JobSeen,
    job_change,
    observe,
    release_held,
    trial_change,
)
from dethpc.control.reconcile.rows import TickRows
from dethpc.control.reconcile.searcher_ops import SearcherOps
from dethpc.store.models import EarlyExit, ExperimentState, Job, Trial


def recorded_end(job: Job) -> ExitRecord | None:
    """The job's newest exit record as its row keeps it (None: none ingested yet)."""
    return (ExitRecord(job.exit_reason, job.exit_code or 0, job.exit_run)
            if job.exit_reason is not None and job.exit_run >= 0 else None)


class JobEnds:
    """The live jobs of one experiment's tick."""

    def __init__(self, rows: TickRows, ops: SearcherOps, cfg: ExperimentConfig) -> None:
        self.rows, self.ops, self.cfg = rows, ops, cfg

    def observe(self, job: Job) -> None:
        """Store what this poll says of ``job`` (nothing when the poll did not see it)."""
        info = self.rows.infos.get(job.ref) if job.ref is not None else None
        if info is None:
            return
        s = self.rows.s
        trial = self.rows.trials.get(job.trial_id)
        o = observe(JobSeen(job.state, job.unknown_ticks, job.reason, job.nodes), info,
                    trial.state if trial is not None else None)
        if o.unknown_ticks != job.unknown_ticks:
            job.unknown_ticks = o.unknown_ticks
            s.add(job)
        if o.reason is not None:
            job.reason = o.reason  # e.g. the pending reason describe shows
            s.add(job)
        if o.moved:
            job.state, job.raw_state, job.nodes = info.state, info.raw_state, o.nodes
            s.add(job)
            if trial is not None and o.trial_state is not None:
                self.rows.set_state(trial, o.trial_state)

    def judge(self, job: Job) -> Decision:
        """Gather the facts of one live job and ask ``dethpc.control.job_end.judge``."""
        info = self.rows.infos.get(job.ref or "")
        if nothing_to_judge(job.restart_count, info):
            return WAIT
        trial = self.rows.trials[job.trial_id]
        kind = self.rows.exp.kind
        facts = JobFacts(restart_count=job.restart_count, unknown_ticks=job.unknown_ticks,
                         last_record=recorded_end(job), wrapped=kind.wrapped)
        if runs_ended_since(facts, info):
            facts = replace(facts, free_runs=self._free_runs(trial, job.ref or ""))
        return judge(facts, TrialFacts(
            terminal=trial.state.is_terminal, stop_requested=trial.stop_requested_at is not None,
            killing=self.rows.exp.state == ExperimentState.STOPPING_KILLED,
            restarts=trial.restarts, max_restarts=self.cfg.max_restarts,
            resubmittable=kind.daemon_submits), info)

    def _free_runs(self, trial: Trial, ref: str) -> frozenset[int]:
        return free_runs(read_new_lines(self.rows.tpaths(trial).exit_log, 0).records, ref)

    def carry_out(self, job: Job, d: Decision) -> None:
        if d.kind == Kind.WAIT:
            return
        rows = self.rows
        info = rows.infos[job.ref or ""]
        trial = rows.trials[job.trial_id]
        hold = hold_of(info.reason)
        change = job_change(d, wrapped=rows.exp.kind.wrapped, restarts=trial.restarts,
                            max_restarts=self.cfg.max_restarts, ref=job.ref or "",
                            recorded=recorded_end(job),
                            launch_failed=hold is not None and hold.after_failed_launch)
        for note in change.restarts:
            trial.restarts += 1
            trial.runs += 1
            rows.event(EventKind.RESTART, note, trial)
        job.restart_count = d.restart_count
        rows.s.add(job)
        if change.close:
            job.ended_at, job.exit_reason = rows.now, d.reason
            job.exit_code = info.exit_code if job.exit_code is None else job.exit_code
            job.unknown_ticks = 0
            rows.close_job(job)
        elif change.cancel and job.ref:
            rows.out.cancel.append(job.ref)
        if change.requeued is not None:
            trial.runs += 1
            rows.event(EventKind.REQUEUED, change.requeued, trial)
        settled = trial_change(d, self._end_facts(trial, info))
        if settled is not None:
            self.ops.settle(trial, settled)
        rows.s.add(trial)

    def release_held(self, job: Job) -> None:
        """A job Slurm held after a failed launch, or after its expedited requeue's
        failed run, whose trial goes on: released (``job_rules.release_held``)."""
        info = self.rows.infos.get(job.ref or "")
        trial = self.rows.trials.get(job.trial_id)
        if info is None or trial is None or not job.live or job.ref is None:
            return
        goes_on = (not trial.state.is_terminal and trial.stop_requested_at is None
                   and self.rows.exp.state == ExperimentState.ACTIVE
                   and job.ref not in self.rows.out.cancel)
        if release_held(info.raw_state, info.reason, info.restart_count, recorded_end(job),
                        goes_on=goes_on):
            self.rows.out.release.append(job.ref)

    def _end_facts(self, trial: Trial, info: JobInfo) -> EndFacts:
        ml = self.cfg.searcher.max_length
        return EndFacts(kind=self.rows.exp.kind, target_length=trial.target_length,
                        full_length=ml.value if ml is not None else 0,
                        restarts=trial.restarts, max_restarts=self.cfg.max_restarts,
                        stop_reason=trial.stop_reason,
                        job_state=info.raw_state or info.state.value,
                        exit_code=info.exit_code,
                        early_exit=EarlyExit(trial.early_exit) if trial.early_exit else None)
