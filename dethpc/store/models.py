"""sqlmodel tables of the state database.

Owns: the schema. Any change here needs an Alembic revision in
``dethpc/store/migrations/versions`` (a test compares the migrated schema with
these models and fails when one is missing).
Must not: hold logic beyond tiny derived properties. All access goes through
``dethpc.store.store.Store``.

States are enums stored as their string values (``Enum(native_enum=False)``:
a VARCHAR on every database, so adding a member needs no migration); JSON
values live in JSON columns. SQLAlchemy does not track in-place changes of a
JSON value: assign a new list/dict instead of mutating the stored one.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import JSON, AutoString, Column, Field, SQLModel

from dethpc.backends.base import JobState
from dethpc.common.exitcodes import ExitReason
from dethpc.common.jobref import JobRef
from dethpc.common.kinds import ExperimentKind

# re-exported: their home is ``dethpc.store.states`` (no ORM), where the read path
# (``dethpc.store.reader``) finds them
from dethpc.store.states import CheckpointState as CheckpointState
from dethpc.store.states import ExperimentState as ExperimentState
from dethpc.store.states import TrialState as TrialState


def now() -> float:
    return time.time()


class BatchState(StrEnum):
    """One array submission: recorded SUBMITTING before ``sbatch`` runs (so a daemon
    killed between sbatch and commit adopts the job by name), SUBMITTED once the
    refs are recorded, FAILED when no job was found under its name."""

    SUBMITTING = "submitting"
    SUBMITTED = "submitted"
    FAILED = "failed"
    #: a worker array every task of which has ended (no longer polled)
    ENDED = "ended"


class BatchKind(StrEnum):
    """What one submission carries (migration 0007)."""

    #: one job (array task) per trial run: every submission before the worker pool
    TRIALS = "trials"
    #: a worker pool's array of long-lived workers (``slurm.workers``): no Job rows
    WORKERS = "workers"
    #: work items put in a worker pool's queue: its Job rows' refs are items, not jobs
    ITEMS = "items"


class EarlyExit(StrEnum):
    """An early exit the training code reported (Determined's ``EarlyExitReason``)."""

    INVALID_HP = "invalid_hp"                    # raised det.InvalidHP
    USER_REQUESTED_STOP = "user_requested_stop"  # chose to stop before its length


class StopReason(StrEnum):
    """Why the daemon asked a trial to checkpoint and exit (the ``stop`` file)."""

    STOP = "stop"       # the searcher stopped it
    PAUSE = "pause"     # experiment paused: resumes on activate
    CANCEL = "cancel"   # experiment cancelled


def _enum(cls: type[StrEnum], *, nullable: bool = False, index: bool = False) -> Any:
    """A column storing ``cls``'s values as a plain VARCHAR (no database enum type)."""
    return Column(sa.Enum(cls, native_enum=False, create_constraint=False, length=32,
                          values_callable=lambda e: [m.value for m in e],
                          validate_strings=True),
                  nullable=nullable, index=index)


def _json(*, nullable: bool = False) -> Any:
    return Column(JSON, nullable=nullable)


class JobRefText(sa.types.TypeDecorator[str]):
    """A job reference column: written as its text, read back as a ``JobRef`` when the
    text names one job (``JobRef.parse``: ``123_4``, ``123``, ``123+1``), else as the
    text it is (a worker pool's item ref, ``item:...``). The stored text is the same as
    before this type (``str(JobRef)`` is that text): no migration, and the schema (a
    VARCHAR) is unchanged."""

    impl = AutoString
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: sa.Dialect) -> str | None:
        return None if value is None else str(value)

    def process_result_value(self, value: str | None, dialect: sa.Dialect) -> str | None:
        if value is None:
            return None
        try:
            return JobRef.parse(value)
        except ValueError:
            return value


class Experiment(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    name: str
    description: str = ""
    labels: list[str] = Field(default_factory=list, sa_column=_json())
    state: ExperimentState = Field(default=ExperimentState.ACTIVE,
                                   sa_column=_enum(ExperimentState))
    config_yaml: str
    run_dir: str
    owner: str = ""
    backend: str = "local"
    kind: ExperimentKind = Field(default=ExperimentKind.MANAGED,
                                 sa_column=_enum(ExperimentKind))
    progress: float = 0.0
    created_at: float = Field(default_factory=now)
    ended_at: float | None = None
    message: str = ""


class SearcherState(SQLModel, table=True):
    experiment_id: int = Field(primary_key=True, foreign_key="experiment.id")
    #: the searcher's ``snapshot()`` (plus the concurrency it was taken under); {} before
    snapshot: dict[str, Any] = Field(default_factory=dict, sa_column=_json())
    initialized: bool = False
    shutdown: bool = False


class Trial(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    experiment_id: int = Field(index=True, foreign_key="experiment.id")
    request_id: int
    state: TrialState = Field(default=TrialState.QUEUED, sa_column=_enum(TrialState))
    hparams: dict[str, Any] = Field(default_factory=dict, sa_column=_json())
    #: searcher target length and the lengths to validate at
    target_length: int = 0
    validate_at: list[int] = Field(default_factory=list, sa_column=_json())
    #: restarts counted against max_restarts (errors, node failures)
    restarts: int = 0
    #: all job ends, whatever the reason (preemptions included)
    runs: int = 0
    steps_completed: int = 0
    best_validation: float | None = None
    latest_validation: float | None = None
    latest_checkpoint: str | None = None
    #: a sentence for people: what ended the trial and why ("stopped by the searcher",
    #: "submitter died", a failure's job state and exit code). Not a vocabulary: the
    #: machine-readable end is ``state``, the job's ``Job.exit_reason`` (``ExitReason``)
    #: and what the searcher was told (``TrialExit``, dethpc.common.exitcodes)
    exit_reason: str = ""
    #: the early exit its training code reported (``EarlyExit``; "" none): the searcher
    #: is told when the trial's job ends (revision 0010)
    early_exit: str = Field(default="", sa_column=Column(sa.String(length=32),
                                                        nullable=False))
    #: the trial's metadata as its training code last set it (``train.set_metadata``)
    meta: dict[str, Any] = Field(default_factory=dict, sa_column=_json())
    #: set when the trial must get a (new) job: created, continued, activated
    needs_job: bool = True
    stop_requested_at: float | None = None
    stop_reason: StopReason | None = Field(default=None,
                                           sa_column=_enum(StopReason, nullable=True))
    created_at: float = Field(default_factory=now)
    ended_at: float | None = None


class Batch(SQLModel, table=True):
    """One array submission. Recorded (state=submitting) *before* sbatch runs, so a
    daemon killed between sbatch and commit can adopt the job by its name."""

    id: int | None = Field(default=None, primary_key=True)
    experiment_id: int = Field(index=True, foreign_key="experiment.id")
    name: str = ""
    state: BatchState = Field(default=BatchState.SUBMITTING, sa_column=_enum(BatchState))
    array_job_id: str | None = None
    pool: str = ""
    throttle: int = 0
    size: int = 0
    created_at: float = Field(default_factory=now)
    kind: BatchKind = Field(default=BatchKind.TRIALS, sa_column=_enum(BatchKind))


class Job(SQLModel, table=True):
    """One array task = one allocation lineage of one trial (requeues keep the row)."""

    id: int | None = Field(default=None, primary_key=True)
    experiment_id: int = Field(index=True, foreign_key="experiment.id")
    trial_id: int = Field(index=True, foreign_key="trial.id")
    batch_id: int = Field(index=True, foreign_key="batch.id")
    array_index: int = 0
    #: "123_4": a ``JobRef`` (``JobRefText``); an ITEMS batch's rows: the item's ref
    ref: str | None = Field(default=None, sa_column=Column(JobRefText(), index=True))
    state: JobState = Field(default=JobState.PENDING, sa_column=_enum(JobState))
    raw_state: str = ""
    restart_count: int = 0
    #: consecutive ticks the backend had no record of the job (lost after a few)
    unknown_ticks: int = 0
    exit_code: int | None = None
    exit_reason: ExitReason | None = Field(default=None,
                                           sa_column=_enum(ExitReason, nullable=True))
    #: SLURM_RESTART_COUNT of the run the exit record belongs to (-1: none yet)
    exit_run: int = -1
    nodes: str = ""
    #: the backend's reason for the job's state, as last polled: Slurm's pending reason
    #: ("Priority", "QOSMaxJobsPerUserLimit", ...) or failure reason; "" none
    reason: str = ""
    live: bool = True             # False once its end has been handled
    #: closed by the daemon (a pending job of a stopped trial) but its ``scancel`` has
    #: not gone through yet: cancelled again on every tick until it does, so a failed
    #: scancel never leaves a job in Slurm's queue that nothing watches
    cancel_due: bool = Field(default=False, index=True)
    submitted_at: float = Field(default_factory=now)
    ended_at: float | None = None


class Checkpoint(SQLModel, table=True):
    uuid: str = Field(primary_key=True)
    experiment_id: int = Field(index=True, foreign_key="experiment.id")
    trial_id: int = Field(index=True, foreign_key="trial.id")
    steps_completed: int = 0
    path: str = ""
    meta: dict[str, Any] = Field(default_factory=dict, sa_column=_json())
    validation_metric: float | None = None
    state: CheckpointState = Field(default=CheckpointState.COMPLETED,
                                   sa_column=_enum(CheckpointState))
    created_at: float = Field(default_factory=now)


class Metric(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(index=True, foreign_key="trial.id")
    #: a ``MetricKind`` value (training | validation); a plain string column, see ``Event``
    kind: str
    steps: int
    metrics: dict[str, Any] = Field(default_factory=dict, sa_column=_json())
    time: float = Field(default_factory=now)


class Event(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    experiment_id: int = Field(index=True)
    trial_id: int | None = None
    #: an ``EventKind`` value. The column stays a plain string (not ``_enum``): a
    #: ``StrEnum`` member is a ``str``, so writing one stores its value, and a read gives a
    #: ``str`` that compares equal to the member -- no migration, and a row of a kind a
    #: later version added still loads
    kind: str
    message: str = ""
    time: float = Field(default_factory=now)
    #: what the event says beyond its message (an alert: level, title, description)
    data: dict[str, Any] | None = Field(default=None, sa_column=_json(nullable=True))


class IngestOffset(SQLModel, table=True):
    """Byte offset up to which a job file has been ingested."""

    trial_id: int = Field(primary_key=True)
    file: str = Field(primary_key=True)   # "metrics.jsonl", "exits.jsonl"
    offset: int = 0


class TaskKind(StrEnum):
    """What a task is (docs/observability.md; notebooks, shells and commands: issue 18)."""

    TENSORBOARD = "tensorboard"
    NOTEBOOK = "notebook"
    SHELL = "shell"
    COMMAND = "command"


class TaskState(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    ENDED = "ended"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        return self in (TaskState.ENDED, TaskState.FAILED)


class Task(SQLModel, table=True):
    """A non-trial process or job a user starts, lists and stops (``dethpc.surfaces.tasks``):
    TensorBoard now, notebooks, shells and commands later; one model for all of them."""

    id: int | None = Field(default=None, primary_key=True)
    kind: TaskKind = Field(sa_column=_enum(TaskKind))
    owner: str = Field(default="", index=True)
    state: TaskState = Field(default=TaskState.STARTING, sa_column=_enum(TaskState))
    #: the process id on ``host`` (a local task; 0: none)
    pid: int = 0
    #: the job id (a task whose job went through a backend; "" none)
    job_ref: str = ""
    #: the backend that job went to (``BackendKind``'s value: ``slurm`` or ``local``);
    #: "" for a task without a job (revision 0011)
    backend: str = Field(default="", sa_column=Column(sa.String(length=32), nullable=False))
    host: str = ""
    #: where it answers: a Unix socket's path, or a URL
    endpoint: str = ""
    #: the task's own owner-only directory (socket, logs, derived files)
    work_dir: str = ""
    #: seconds without a request before it stops itself; 0: never
    idle_timeout_s: float = 0.0
    experiment_ids: list[int] = Field(default_factory=list, sa_column=_json())
    message: str = ""
    created_at: float = Field(default_factory=now)
    ended_at: float | None = None


class DaemonLease(SQLModel, table=True):
    """The right to act as the daemon of one user's experiments (``dethpc.control.lease``): held
    by one process on one host until ``expires_at``, renewed every tick; in the database,
    so it holds across login nodes sharing a home, where ``fcntl`` locks over NFS do not."""

    owner: str = Field(primary_key=True)
    #: ``host:pid:token`` of the holder ("" when released)
    holder: str = ""
    acquired_at: float = 0.0
    expires_at: float = 0.0
