"""An experiment's kind: who submits its jobs and what wraps them.

Owns: ``ExperimentKind`` (docs/existing-scripts.md), which the store persists, job
building maps to its job scripts (``dethpc.jobs.kinds``) and the control plane asks
before it submits or judges.
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
