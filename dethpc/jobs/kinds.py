"""What the daemon submits for an experiment's trials, by experiment kind.

Owns: ``ManagedJobs`` and ``jobs_for(kind)``, the one table from ``ExperimentKind`` to
its implementation of ``dethpc.jobs.protocol.KindJobs``:
MANAGED -> ``ManagedJobs`` (sbatch_templates/trial.sbatch.j2 through
``dethpc.jobs.jobscript``), SCRIPT -> ``dethpc.jobs.script_jobs.ScriptJobs`` (the user's
unchanged script in dethpc's wrapper, the user's own directives on the array).
The daemon and ``experiments.check_with_scheduler`` ask this table instead of
branching on the kind.
Must not: write files or submit (the daemon does), or know a kind the daemon does not
submit (SBATCH and DETACHED jobs are submitted by their owners).
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from dethpc.common.errors import DethpcError
from dethpc.common.kinds import ExperimentKind
from dethpc.common.traits import BackendKind
from dethpc.config.model import ClusterConfig, ExperimentConfig
from dethpc.jobs.protocol import KindJobs, TrialJob
from dethpc.jobs.script_jobs import ScriptJobs


class ManagedJobs:
    """``dethpc submit``: dethpc's trial template runs the config's entrypoint."""

    def trial_script(self, cfg: ExperimentConfig, cluster: ClusterConfig, *,
                     backend: BackendKind | str, python: str, run_dir: Path,
                     trial: TrialJob, jenv: jinja2.Environment | None = None) -> str:
        from dethpc.jobs.jobscript import trial_script

        return trial_script(cfg, cluster, backend=backend, python=python, run_dir=run_dir,
                            exp_id=trial.exp_id, trial_id=trial.trial_id, jenv=jenv)

    def array_script(self, cfg: ExperimentConfig, cluster: ClusterConfig, *, run_dir: Path,
                     exp_id: int, batch_id: int, tasks: list[tuple[int, Path]], tag: str = "",
                     jenv: jinja2.Environment | None = None) -> str:
        from dethpc.jobs.jobscript import array_script

        return array_script(cfg, cluster, run_dir=run_dir, exp_id=exp_id, batch_id=batch_id,
                            tasks=tasks, tag=tag, jenv=jenv)

    def workdir(self, run_dir: Path) -> Path:
        return run_dir

    def verdict_script(self, cfg: ExperimentConfig, cluster: ClusterConfig, *,
                       backend: BackendKind | str, python: str, run_dir: Path) -> str:
        return self.trial_script(cfg, cluster, backend=backend, python=python,
                                 run_dir=run_dir, trial=TrialJob(exp_id=0, trial_id=1))


def jobs_for(kind: ExperimentKind, run_dir: Path | None = None) -> KindJobs:
    """The job scripts of an experiment of ``kind`` (``run_dir``: the experiment's run
    directory, where a SCRIPT experiment keeps the user's script and options)."""
    if kind == ExperimentKind.MANAGED:
        return ManagedJobs()
    if kind == ExperimentKind.SCRIPT:
        if run_dir is None:
            raise DethpcError("a script experiment's jobs need its run directory")
        return ScriptJobs.load(run_dir)
    raise DethpcError(f"the daemon does not write jobs for {kind.value} experiments "
                      "(their owner submits them)")
