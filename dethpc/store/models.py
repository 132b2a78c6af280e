"""sqlmodel tables of the state database.

Owns: the schema (and ``SCHEMA_VERSION``; bump it on any table change).
Must not: hold logic beyond tiny derived properties. All access goes through
``dethpc.store.store.Store``.
"""

from __future__ import annotations

import time
from enum import StrEnum

from sqlmodel import Field, SQLModel

SCHEMA_VERSION = 1


def now() -> float:
    return time.time()


class ExperimentState(StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    STOPPING_CANCELED = "STOPPING_CANCELED"  # cancel: ask trials to checkpoint and exit
    STOPPING_KILLED = "STOPPING_KILLED"      # kill: scancel everything now
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"

    @property
    def is_terminal(self) -> bool:
        return self in (ExperimentState.COMPLETED, ExperimentState.CANCELED,
                        ExperimentState.ERROR)


class TrialState(StrEnum):
    QUEUED = "QUEUED"        # created, waiting for (re)submission or in the queue
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"        # exited cleanly on a pause; resumes on activate
    WAITING = "WAITING"      # promotion variant: finished a rung, waiting for the searcher
    COMPLETED = "COMPLETED"  # reached its searcher length
    STOPPED = "STOPPED"      # stopped by the searcher (early-stopped by ASHA)
    CANCELED = "CANCELED"
    ERROR = "ERROR"          # failed past max_restarts

    @property
    def is_terminal(self) -> bool:
        return self in (TrialState.COMPLETED, TrialState.STOPPED, TrialState.CANCELED,
                        TrialState.ERROR)


class SchemaInfo(SQLModel, table=True):
    id: int = Field(default=1, primary_key=True)
    version: int = SCHEMA_VERSION


class Experiment(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    name: str
    description: str = ""
    labels_json: str = "[]"
    state: str = ExperimentState.ACTIVE.value
    config_yaml: str
    run_dir: str
    owner: str = ""
    backend: str = "local"
    progress: float = 0.0
    created_at: float = Field(default_factory=now)
    ended_at: float | None = None
    message: str = ""


class SearcherState(SQLModel, table=True):
    experiment_id: int = Field(primary_key=True, foreign_key="experiment.id")
    snapshot_json: str = "{}"
    #: events applied so far (guards against feeding the same event twice)
    events_applied: int = 0
    initialized: bool = False
    shutdown: bool = False


class Trial(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    experiment_id: int = Field(index=True, foreign_key="experiment.id")
    request_id: int
    state: str = TrialState.QUEUED.value
    hparams_json: str = "{}"
    #: searcher target length and the lengths to validate at (JSON list)
    target_length: int = 0
    validate_at_json: str = "[]"
    #: restarts counted against max_restarts (errors, node failures)
    restarts: int = 0
    #: all job ends, whatever the reason (preemptions included)
    runs: int = 0
    steps_completed: int = 0
    best_validation: float | None = None
    latest_validation: float | None = None
    latest_checkpoint: str | None = None
    exit_reason: str = ""
    #: set when the trial must get a (new) job: created, continued, activated
    needs_job: bool = True
    stop_requested_at: float | None = None
    stop_reason: str = ""    # stop | pause | cancel
    created_at: float = Field(default_factory=now)
    ended_at: float | None = None


class Batch(SQLModel, table=True):
    """One array submission. Recorded (state=submitting) *before* sbatch runs, so a
    daemon killed between sbatch and commit can adopt the job by its name."""

    id: int | None = Field(default=None, primary_key=True)
    experiment_id: int = Field(index=True, foreign_key="experiment.id")
    name: str = ""
    state: str = "submitting"     # submitting | submitted | failed
    array_job_id: str | None = None
    pool: str = ""
    throttle: int = 0
    size: int = 0
    created_at: float = Field(default_factory=now)


class Job(SQLModel, table=True):
    """One array task = one allocation lineage of one trial (requeues keep the row)."""

    id: int | None = Field(default=None, primary_key=True)
    experiment_id: int = Field(index=True, foreign_key="experiment.id")
    trial_id: int = Field(index=True, foreign_key="trial.id")
    batch_id: int = Field(index=True, foreign_key="batch.id")
    array_index: int = 0
    ref: str | None = Field(default=None, index=True)   # "123_4"
    state: str = "pending"        # dethpc.backends.base.JobState value
    raw_state: str = ""
    restart_count: int = 0
    exit_code: int | None = None
    exit_reason: str = ""
    #: SLURM_RESTART_COUNT of the run the exit record belongs to (-1: none yet)
    exit_run: int = -1
    nodes: str = ""
    live: bool = True             # False once its end has been handled
    submitted_at: float = Field(default_factory=now)
    ended_at: float | None = None


class Checkpoint(SQLModel, table=True):
    uuid: str = Field(primary_key=True)
    experiment_id: int = Field(index=True, foreign_key="experiment.id")
    trial_id: int = Field(index=True, foreign_key="trial.id")
    steps_completed: int = 0
    path: str = ""
    metadata_json: str = "{}"
    validation_metric: float | None = None
    state: str = "COMPLETED"      # COMPLETED | DELETED
    created_at: float = Field(default_factory=now)


class Metric(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(index=True, foreign_key="trial.id")
    kind: str                     # training | validation
    steps: int
    metrics_json: str
    time: float = Field(default_factory=now)


class Event(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    experiment_id: int = Field(index=True)
    trial_id: int | None = None
    kind: str
    message: str = ""
    time: float = Field(default_factory=now)


class IngestOffset(SQLModel, table=True):
    """Byte offset up to which a job file has been ingested."""

    trial_id: int = Field(primary_key=True)
    file: str = Field(primary_key=True)   # "metrics.jsonl", "exits.jsonl"
    offset: int = 0
