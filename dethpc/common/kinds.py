"""An experiment's kind, and the kinds of what the store records about it.

Owns: ``ExperimentKind`` (docs/existing-scripts.md), which the store persists, job
building maps to its job scripts (``dethpc.jobs.kinds``) and the control plane asks
before it submits or judges; ``EventKind`` (``Event.kind``) and ``MetricKind``
(``Metric.kind``), which the control plane writes and the searcher replay and the
surfaces query (here, below all of them, so that each may import it).
Must not: import anything of dethpc.
"""

from __future__ import annotations

from enum import StrEnum


class ExperimentKind(StrEnum):
    """Who submits an experiment's jobs and what wraps them (docs/existing-scripts.md)."""

    #: ``dethpc submit``: the daemon submits trial scripts (sbatch_templates/trial.sbatch.j2)
    MANAGED = "managed"
    #: ``dethpc sbatch --search``: the daemon submits the user's unchanged script, wrapped
    SCRIPT = "script"
    #: ``dethpc sbatch``: submitted at once by the CLI, wrapped; the daemon only tracks it
    SBATCH = "sbatch"
    #: a job dethpc did not submit that registered itself (``core.init()``, shell API)
    DETACHED = "detached"

    @property
    def daemon_submits(self) -> bool:
        """The daemon (re)submits its trials' jobs; otherwise Slurm's requeue is the only
        second run a job gets, and a job's end is its trial's end."""
        return self in (ExperimentKind.MANAGED, ExperimentKind.SCRIPT)

    @property
    def user_script(self) -> bool:
        """The job runs the user's own script under dethpc's wrapper (no in-job API
        assumed: no heartbeat, no metrics unless it reports them)."""
        return self in (ExperimentKind.SCRIPT, ExperimentKind.SBATCH)

    @property
    def wrapped(self) -> bool:
        """A dethpc job script runs the work and writes ``exits.jsonl`` per run."""
        return self != ExperimentKind.DETACHED


class EventKind(StrEnum):
    """What an experiment event (``Event.kind`` in the store) says happened.

    The control plane writes them, the surfaces and the searcher replay read them back.
    The store keeps the value in a plain string column: a ``StrEnum`` member is a ``str``,
    so writing one stores its value and a read (a plain ``str``) compares equal to it; a
    new member needs no migration. Every ``ExitReason`` value is a member too: a run's
    free exit (a requeue the job took itself) is recorded under its reason (a unit test
    holds the two lists together).
    """

    # an experiment's life
    CREATED = "created"              # submitted (``dethpc submit`` / ``dethpc sbatch``)
    ENDED = "ended"                  # reached a terminal state
    PAUSE = "pause"                  # the user's wishes (``experiment pause`` ...)
    ACTIVATE = "activate"
    CANCEL = "cancel"
    KILL = "kill"
    CONCURRENCY = "concurrency"      # max_concurrent_trials changed
    # jobs and batches
    SUBMITTED = "submitted"          # a batch's jobs were accepted by the backend
    ADOPTED = "adopted"              # a restarted daemon found a job it had submitted
    WORKERS = "workers"              # the worker pool grew or shrank
    PULL = "pull"                    # an image pre-pull job was submitted
    THROTTLE = "throttle"            # submission held back (site limits, pacing)
    LIMIT = "limit"                  # sbatch refused over a site limit: tried later
    HUNG = "hung"                    # the hang watchdog ended a job (also an exit reason)
    REHEARSAL = "rehearsal"          # ``dethpc rehearse`` injected a fault
    # trials
    TRIAL_CREATED = "trial_created"
    PROMOTED = "promoted"            # ASHA's promotion variant continued a trial
    RESTART = "restart"              # a run failed and counts against max_restarts
    RESUBMIT = "resubmit"            # a new job for the trial, not counted
    REQUEUE = "requeue"              # a new job from the latest checkpoint, counted
    STOP_REQUESTED = "stop_requested"
    STOP_TIMEOUT = "stop_timeout"
    EARLY_EXIT = "early_exit"        # the training code reported an early exit
    ALERT = "alert"                  # ``core_context.alert``
    CHECKPOINT_DELETED = "checkpoint_deleted"
    SEARCHER = "searcher"            # one searcher call, for replay (``searchers.replay``)
    # problems
    WARNING = "warning"
    ERROR = "error"                  # also an exit reason
    # a run's free exit, recorded under its ``ExitReason`` (the values of that enum)
    COMPLETED = "completed"
    PREEMPTED = "preempted"
    TIME_LIMIT = "time_limit"
    REQUEUED = "requeued"
    STOPPED = "stopped"
    NODE_FAIL = "node_fail"
    CANCELLED = "cancelled"


class MetricKind(StrEnum):
    """What a stored metric row (``Metric.kind``) is: the ``kind`` of its ``metrics.jsonl``
    line. A plain string column in the store, like ``EventKind``."""

    TRAINING = "training"
    VALIDATION = "validation"
