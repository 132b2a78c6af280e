"""Experiments the daemon does not submit jobs for (``dethpc sbatch``, detached jobs),
reconciled against the real store: the job's end is the trial's end, Slurm's own
requeues are judged as for any trial, and the daemon never submits a job for them.

Uses the reconcile-store helpers (``tests/unit/control/test_reconcile_store.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import select

from dethpc.backends.base import JobInfo, JobState
from dethpc.backends.local import LocalBackend
from dethpc.common.kinds import ExperimentKind
from dethpc.config.model import ClusterConfig
from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.store.models import (
    Batch,
    BatchState,
    Event,
    Experiment,
    ExperimentState,
    Job,
    SearcherState,
    Trial,
    TrialState,
)
from tests.unit.control.test_reconcile_store import tick


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'db.sqlite'}")

CONFIG = """\
name: t
entrypoint: python3 train.py
max_restarts: 2
searcher: {name: single, metric: loss}
"""


def kind_experiment(store: Store, tmp_path: Path, kind: ExperimentKind,
                    config: str = CONFIG) -> tuple[int, int, str]:
    """An experiment of ``kind`` as its creator records it: searcher initialized and
    shut down, one trial, one live job ``9`` (no job needed from the daemon)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with store.session() as s:
        exp = Experiment(name="t", config_yaml=config, run_dir=str(run_dir), kind=kind)
        s.add(exp)
        s.flush()
        assert exp.id is not None
        s.add(SearcherState(experiment_id=exp.id, initialized=True, shutdown=True))
        trial = Trial(experiment_id=exp.id, request_id=0, needs_job=False)
        batch = Batch(experiment_id=exp.id, state=BatchState.SUBMITTED, array_job_id="9",
                      name="x")
        s.add(trial)
        s.add(batch)
        s.flush()
        assert trial.id is not None and batch.id is not None
        s.add(Job(experiment_id=exp.id, trial_id=trial.id, batch_id=batch.id, ref="9",
                  state=JobState.RUNNING))
        return exp.id, trial.id, "9"


def snapshot(store: Store) -> tuple[Experiment, Trial, Job]:
    with store.session() as s:
        return (s.exec(select(Experiment)).one(), s.exec(select(Trial)).one(),
                s.exec(select(Job)).one())


def write_exit(tmp_path: Path, trial_id: int, line: str) -> None:
    tdir = tmp_path / "run" / "trials" / str(trial_id)
    tdir.mkdir(parents=True, exist_ok=True)
    with (tdir / "exits.jsonl").open("a") as f:
        f.write(line + "\n")


def test_sbatch_job_that_fails_errors_its_trial_and_gets_no_new_job(store, tmp_path):
    exp_id, trial_id, ref = kind_experiment(store, tmp_path, ExperimentKind.SBATCH)
    write_exit(tmp_path, trial_id, '{"reason": "error", "code": 3, "restart": 0, "job": "9"}')
    tick(store, exp_id, {ref: JobInfo(ref=ref, state=JobState.FAILED, exit_code=3)})
    exp, trial, job = snapshot(store)
    assert trial.state == TrialState.ERROR and not trial.needs_job and not job.live
    assert "not resubmitted" in trial.exit_reason and "dethpc sbatch" in trial.exit_reason
    assert exp.state == ExperimentState.ERROR
    # the daemon submits nothing for it, even if something asked for a job
    with store.session() as s:
        t = s.get(Trial, trial_id)
        assert t is not None
        t.needs_job, t.state = True, TrialState.QUEUED
        e = s.get(Experiment, exp_id)
        assert e is not None
        e.state = ExperimentState.ACTIVE
        s.add(t)
        s.add(e)
    daemon = Daemon(store, ClusterConfig(runs_root=tmp_path / "runs"),
                    LocalBackend(tmp_path / "spool"))
    assert daemon.submit_experiment(exp_id) == 0
    with store.session() as s:
        assert len(list(s.exec(select(Batch)))) == 1 and len(list(s.exec(select(Job)))) == 1


def test_sbatch_job_requeued_after_a_preemption_is_not_counted(store, tmp_path):
    exp_id, trial_id, ref = kind_experiment(store, tmp_path, ExperimentKind.SBATCH)
    write_exit(tmp_path, trial_id,
               '{"reason": "preempted", "code": 0, "restart": 0, "job": "9", "signal": "USR1"}')
    tick(store, exp_id, {ref: JobInfo(ref=ref, state=JobState.PENDING, restart_count=1)})
    _, trial, job = snapshot(store)
    assert trial.restarts == 0 and trial.runs == 1 and job.live and job.restart_count == 1
    assert not trial.state.is_terminal
    # the next run completes
    write_exit(tmp_path, trial_id, '{"reason": "completed", "code": 0, "restart": 1, "job": "9"}')
    tick(store, exp_id, {ref: JobInfo(ref=ref, state=JobState.COMPLETED, restart_count=1,
                                      exit_code=0)})
    exp, trial, job = snapshot(store)
    assert trial.state == TrialState.COMPLETED and exp.state == ExperimentState.COMPLETED
    assert trial.restarts == 0


def test_sbatch_timeout_with_an_error_record_ends_time_limit(store, tmp_path):
    exp_id, trial_id, ref = kind_experiment(store, tmp_path, ExperimentKind.SBATCH)
    write_exit(tmp_path, trial_id, '{"reason": "error", "code": 143, "restart": 0, "job": "9"}')
    tick(store, exp_id, {ref: JobInfo(ref=ref, state=JobState.TIMEOUT, raw_state="TIMEOUT",
                                      exit_code=143)})
    _, trial, job = snapshot(store)
    assert job.exit_reason == "time_limit" and trial.state == TrialState.ERROR
    assert trial.exit_reason.startswith("job ended TIMEOUT (time_limit")


def test_script_timeout_with_an_error_record_is_restarted_and_counted(store, tmp_path):
    exp_id, trial_id, ref = kind_experiment(store, tmp_path, ExperimentKind.SCRIPT)
    write_exit(tmp_path, trial_id, '{"reason": "error", "code": 143, "restart": 0, "job": "9"}')
    tick(store, exp_id, {ref: JobInfo(ref=ref, state=JobState.TIMEOUT, exit_code=143)})
    _, trial, job = snapshot(store)
    assert trial.state == TrialState.QUEUED and trial.needs_job and trial.restarts == 1
    assert job.exit_reason == "time_limit" and not job.live


def test_detached_job_completed_without_a_record_completes(store, tmp_path):
    exp_id, trial_id, ref = kind_experiment(store, tmp_path, ExperimentKind.DETACHED,
                                            CONFIG.replace("max_restarts: 2",
                                                           "max_restarts: 0"))
    # Slurm requeued it once (its own --requeue): not counted, even at max_restarts 0
    tick(store, exp_id, {ref: JobInfo(ref=ref, state=JobState.PENDING, restart_count=1)})
    _, trial, job = snapshot(store)
    assert job.live and trial.restarts == 0 and trial.runs == 1
    assert not trial.state.is_terminal
    tick(store, exp_id, {ref: JobInfo(ref=ref, state=JobState.COMPLETED, restart_count=1,
                                      exit_code=0)})
    exp, trial, job = snapshot(store)
    assert trial.state == TrialState.COMPLETED and not job.live
    assert exp.state == ExperimentState.COMPLETED
    with store.session() as s:
        kinds = [e.kind for e in s.exec(select(Event))]
    assert "requeued" in kinds


def test_searcher_of_an_initialized_experiment_creates_no_trial(store, tmp_path):
    exp_id, _, ref = kind_experiment(store, tmp_path, ExperimentKind.SBATCH)
    tick(store, exp_id, {ref: JobInfo(ref=ref, state=JobState.RUNNING)})
    with store.session() as s:
        assert len(list(s.exec(select(Trial)))) == 1
