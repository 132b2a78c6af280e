"""The ``Backend`` protocol and the value types every backend speaks.

Owns: ``JobState`` (dethpc's own job states), ``JobRequest`` (one submission,
an array of tasks, one per trial), ``JobInfo`` (what one batched poll says of
one task), the per-user limits a pool's jobs fall under (``Limit``, ``PoolLimits``,
``UNLIMITED``: what ``Backend.job_limits`` answers; ``dethpc.backends.limits`` counts
and plans with them) and the ``Backend`` protocol.
Must not: run commands or touch the store.

Job references are ``JobRef``s (``dethpc.common.jobref``): ``"<array_job_id>_<task>"``
for array tasks (the form ``squeue``/``sacct``/``scancel`` accept) and ``"<job_id>"``
otherwise, each a ``str`` with its parts known. A backend gives them (``submit``) and
takes them (``poll``, ``cancel``, ``act``, ``signal_steps``); text from elsewhere is
read into one with ``JobRef.parse``/``job_refs`` first. A ``JobInfo``'s ``ref`` is the
``JobRef`` asked about (a worker pool's item, read from its directory and never a
backend's, is named by its own text: ``dethpc.control.worker_pool_view``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from dethpc.common.jobref import JobRef
from dethpc.common.traits import BackendTraits


class JobAction(StrEnum):
    """What ``Backend.act`` does to jobs (the value is ``scontrol``'s verb)."""

    #: end the run and queue the same job again (``SLURM_RESTART_COUNT`` grows)
    REQUEUE = "requeue"
    #: lift a hold: a job Slurm held after a failed launch or an expedited requeue's
    #: failed run
    RELEASE = "release"


class JobState(StrEnum):
    PENDING = "pending"          # queued (also: requeued and waiting, held, configuring)
    RUNNING = "running"          # running, completing, stage-out, resizing, signaling
    SUSPENDED = "suspended"      # suspended / stopped by Slurm
    COMPLETED = "completed"      # exit 0
    FAILED = "failed"            # non-zero exit, boot failure, special exit
    CANCELLED = "cancelled"      # scancel / revoked / deadline
    TIMEOUT = "timeout"          # walltime reached
    PREEMPTED = "preempted"      # preempted and not requeued (PreemptMode=CANCEL)
    NODE_FAIL = "node_fail"      # node failure
    OUT_OF_MEMORY = "out_of_memory"
    UNKNOWN = "unknown"          # the backend has no record of the job

    @property
    def is_terminal(self) -> bool:
        return self not in (JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED)


@dataclass(frozen=True)
class JobRequest:
    """One ``sbatch`` (an array when ``array_indices`` is non-empty).

    The script is already rendered to ``script`` and carries its own #SBATCH
    directives; the fields below are what a backend needs beyond the script
    (the local backend emulates time limit and signal from them).
    """

    name: str                        # identity: "dethpc-e<exp>-b<batch>"
    comment: str                     # identity: "dethpc:exp=<exp>:batch=<batch>"
    script: Path
    workdir: Path
    array_indices: tuple[int, ...] = ()
    throttle: int | None = None      # the %K of --array
    time_limit_s: int | None = None
    signal: str | None = None        # e.g. "USR2", sent signal_lead_s before the limit
    signal_lead_s: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()  # extra sbatch argv (never a shell string)
    #: where the job's stdout and stderr go (sbatch's ``--output``; a file, no ``%``
    #: patterns), for a job whose caller follows that file (an interactive task's
    #: ``job.log``); None: the backend's default (Slurm: the script's own ``--output``,
    #: else ``slurm-%j.out``; local: its spool's ``output.log``)
    output: Path | None = None

    def task_ref(self, job_id: str, index: int) -> JobRef:
        """The ref of task ``index`` of the job ``job_id`` this request became (the job
        itself when it is no array)."""
        return JobRef(job_id).task_ref(index if self.array_indices else None)


@dataclass(frozen=True)
class JobInfo:
    ref: str                         # a JobRef: "<array_job_id>_<task>" or "<job_id>"
    state: JobState
    raw_state: str = ""              # the backend's own word (e.g. "NODE_FAIL")
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""                 # pending reason / failure reason
    restart_count: int = 0
    nodes: str = ""
    name: str = ""
    comment: str = ""
    qos: str = ""                    # the QoS and account the job runs under (per-user
    account: str = ""                # limits count per QoS / association); "" unknown


@runtime_checkable
class Backend(Protocol):
    """Where jobs run. Every method makes O(1) backend calls, whatever the number of refs."""

    name: str
    #: what this backend can do (``dethpc.common.traits``): the one place backends differ
    traits: BackendTraits

    def available(self) -> bool:
        """True when this backend can be used from this machine."""
        ...

    def submit(self, request: JobRequest) -> list[JobRef]:
        """Submit one (array) job; return one ref per array index, in index order."""
        ...

    def poll(self, refs: Sequence[JobRef]) -> dict[str, JobInfo]:
        """One batched query for all refs, keyed by them. A ref the backend has no
        record of is UNKNOWN; one it cannot tell about this time (Slurm's accounting
        down or behind) is left out of the answer: no news, never a verdict."""
        ...

    def find(self, names: Sequence[str]) -> list[JobInfo]:
        """Jobs (tasks) whose job name is one of ``names``: adoption after a crash."""
        ...

    def cancel(self, refs: Sequence[JobRef], signal: str | None = None) -> None:
        """Cancel (or signal, when ``signal`` is given) all refs in one call."""
        ...

    def act(self, refs: Sequence[JobRef], action: JobAction) -> None:
        """``action`` on all refs in one call (Slurm: ``scontrol requeue|release``)."""
        ...

    def signal_steps(self, refs: Sequence[JobRef], signal: str) -> None:
        """Send ``signal`` to the processes of the jobs' steps (every rank), not to
        their batch shells (the hang watchdog's stack dump; ``KILL``: the steps end and
        the batch shells record the run's end). O(1) calls for all refs."""
        ...

    def set_throttle(self, array_job_id: str, limit: int) -> None:
        """Change the running-task limit of a live array (``ArrayTaskThrottle``)."""
        ...

    def max_array_size(self) -> int:
        """Largest array index + 1 the backend accepts (Slurm ``MaxArraySize``)."""
        ...

    def job_limits(self, partition: str | None, qos: str | None, account: str | None,
                   extra_args: Sequence[str] = ()) -> PoolLimits:
        """The user's per-user job limits for jobs in this partition/QoS/account
        (discovered once, cached); ``UNLIMITED`` where there are none."""
        ...

    def user_jobs(self) -> list[JobInfo] | None:
        """Every live job (array task) of the user the last ``poll`` saw, from that same
        query (no command); None when the backend does not see the user's whole queue."""
        ...

    def judge(self, request: JobRequest) -> str | None:
        """The scheduler's verdict on ``request`` without submitting it: None when it
        would take the job, else the scheduler's own words (``traits.submit_verdict``)."""
        ...

    def check_pool(self, partition: str | None, qos: str | None, nodes: int,
                   tasks_per_node: int, gpus_per_node: int) -> None:
        """Raise ``SubmitError`` when the partition/QoS do not exist or the allocation
        cannot fit; a no-op on backends without partitions."""
        ...


# ------------------------------------------------------------- per-user job limits
@dataclass(frozen=True)
class Limit:
    """One per-user limit: on a QoS (``MaxSubmitJobsPerUser``/``MaxJobsPerUser``) or
    on the user's association with an account (``MaxSubmitJobs``/``MaxJobs``)."""

    scope: str                      # "qos" or "assoc"
    name: str                       # the QoS name or the account name
    max_submit: int | None = None   # pending + running jobs (tasks) the user may have
    max_jobs: int | None = None     # running jobs the user may have

    def applies_to(self, job: JobInfo) -> bool:
        """True when Slurm counts ``job`` against this limit. A job whose QoS or
        account the poll did not report counts (erring on the side of fewer jobs)."""
        value = job.qos if self.scope == "qos" else job.account
        return not value or value == self.name

    def __str__(self) -> str:
        what = "QoS" if self.scope == "qos" else "association with account"
        parts = [f"{k}={v}" for k, v in (("MaxSubmitJobs", self.max_submit),
                                         ("MaxJobs", self.max_jobs)) if v is not None]
        return f"{what} {self.name!r} ({', '.join(parts) or 'no per-user limit'})"


@dataclass(frozen=True)
class PoolLimits:
    """The per-user limits a pool's jobs fall under: the QoS and account they run in
    (the pool's own, else the user's defaults; ``None`` when unknown) and the limits."""

    qos: str | None = None
    account: str | None = None
    limits: tuple[Limit, ...] = ()

    @property
    def max_submit(self) -> int | None:
        """The tightest submit limit, ``None`` when there is none."""
        values = [lim.max_submit for lim in self.limits if lim.max_submit is not None]
        return min(values) if values else None

    def tag(self) -> JobInfo:
        """A stand-in for one job this pool just submitted (not yet seen by a poll)."""
        return JobInfo(ref="", state=JobState.PENDING, qos=self.qos or "",
                       account=self.account or "")


#: no limits at all (the local backend, or a site without per-user limits)
UNLIMITED = PoolLimits()
