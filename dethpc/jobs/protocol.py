"""What every experiment kind's job builder answers: the ``KindJobs`` protocol.

Owns: ``TrialJob`` (one trial as its job script needs it) and ``KindJobs`` (a trial's
job script, a batch's array script, the directory the jobs start in, and the script
``sbatch --test-only`` judges at submit). Implementations: ``dethpc.jobs.kinds``
(``ManagedJobs``, and the table ``jobs_for``) and ``dethpc.jobs.script_jobs``
(``ScriptJobs``).
Must not: import an implementation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import jinja2

from dethpc.common.traits import BackendKind
from dethpc.config.model import ClusterConfig, ExperimentConfig


@dataclass(frozen=True)
class TrialJob:
    """One trial as its job script needs it."""

    exp_id: int
    trial_id: int
    hparams: dict[str, Any] = field(default_factory=dict)
    #: the searcher's target length (0: none, the training code decides) and its unit
    target_length: int = 0
    unit: str = "batches"


class KindJobs(Protocol):
    def trial_script(self, cfg: ExperimentConfig, cluster: ClusterConfig, *,
                     backend: BackendKind | str, python: str, run_dir: Path,
                     trial: TrialJob, jenv: jinja2.Environment | None = None) -> str:
        """The text of ``trials/<id>/job.sbatch``."""
        ...

    def array_script(self, cfg: ExperimentConfig, cluster: ClusterConfig, *, run_dir: Path,
                     exp_id: int, batch_id: int, tasks: list[tuple[int, Path]], tag: str = "",
                     jenv: jinja2.Environment | None = None) -> str:
        """The text of ``arrays/batch-<id>.sbatch``: one task per trial script."""
        ...

    def workdir(self, run_dir: Path) -> Path:
        """Where the submitted jobs start (sbatch ``--chdir``)."""
        ...

    def verdict_script(self, cfg: ExperimentConfig, cluster: ClusterConfig, *,
                       backend: BackendKind | str, python: str, run_dir: Path) -> str:
        """The script whose directives ``sbatch --test-only`` judges before the experiment
        is recorded (``run_dir`` is a scratch directory)."""
        ...
