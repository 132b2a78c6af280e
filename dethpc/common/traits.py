"""What a backend can do, declared once: the one place backends differ.

Owns: ``BackendKind`` (the names a cluster config's ``backend`` may take and that a
job sees in ``$DETHPC_BACKEND``) and ``BackendTraits`` (the capabilities that change
what dethpc renders, submits and checks). The daemon, the job scripts, the launchers
and the submit-time checks ask a traits object, never compare backend names.
Must not: import a backend (a login node without Slurm still reads these).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class BackendKind(enum.Enum):
    LOCAL = "local"
    SLURM = "slurm"

    @classmethod
    def parse(cls, text: str | None) -> BackendKind | None:
        """The kind named by ``text`` (any case), or None for an empty or unknown name."""
        try:
            return cls((text or "").strip().lower())
        except ValueError:
            return None


@dataclass(frozen=True)
class BackendTraits:
    """What a backend can do, asked instead of its name."""

    kind: BackendKind
    #: job steps start through ``srun``: a plain entrypoint runs in a one-task step,
    #: a dethpc launcher starts its ranks with ``srun`` (the local backend forks them)
    srun_steps: bool
    #: heterogeneous jobs (``slurm.components``): one job with several shapes
    het_jobs: bool
    #: a preempted job requeues itself in place (``scontrol requeue``, same job id,
    #: restart count + 1); otherwise it exits with ``LOCAL_REQUEUE_EXIT`` and the
    #: backend starts it again
    requeue_in_place: bool
    #: the scheduler can judge a job without running it (``sbatch --test-only``), so
    #: ``dethpc submit`` asks it about the first trial's job
    submit_verdict: bool
    #: array jobs carry a live concurrency throttle (``ArrayTaskThrottle``)
    array_throttle: bool
    #: users submit their own batch scripts with the scheduler's ``sbatch``, so
    #: ``dethpc sbatch`` can wrap and track them
    user_sbatch: bool = False
    #: jobs can wait on another job's success (``--dependency=afterok:J``)
    job_dependencies: bool = False

    @property
    def name(self) -> str:
        return self.kind.value


LOCAL = BackendTraits(kind=BackendKind.LOCAL, srun_steps=False, het_jobs=False,
                      requeue_in_place=False, submit_verdict=False, array_throttle=True)
SLURM = BackendTraits(kind=BackendKind.SLURM, srun_steps=True, het_jobs=True,
                      requeue_in_place=True, submit_verdict=True, array_throttle=True,
                      user_sbatch=True, job_dependencies=True)
_BY_KIND = {t.kind: t for t in (LOCAL, SLURM)}


def traits_of(kind: BackendKind | str) -> BackendTraits:
    """The traits of a backend kind or name (``ValueError`` for an unknown name: the
    config checker has refused it long before)."""
    found = kind if isinstance(kind, BackendKind) else BackendKind.parse(kind)
    if found is None:
        raise ValueError(f"unknown backend {kind!r}; allowed: "
                         f"{', '.join(k.value for k in BackendKind)}")
    return _BY_KIND[found]
