"""The daemon side's half of a work item: a trial's command and environment, built by
the same functions that build its job script (``dethpc.jobs.render.trial_env``,
``dethpc.jobs.jobscript``), so a trial run by a pool worker sees the job contract's
environment unchanged.

Owns: ``work_item`` and the rule of which experiments a pool can run
(``worker_pool_problem``: one process per trial, no dethpc launcher, no het components).
Must not: write files (``dethpc.common.worker_queue.enqueue`` does) or submit.
"""

from __future__ import annotations

from pathlib import Path

from dethpc.common.paths import ExperimentPaths
from dethpc.common.traits import BackendKind
from dethpc.common.worker_queue import WorkItem
from dethpc.config.model import ClusterConfig, ExperimentConfig
from dethpc.jobs.jobscript import in_image, inside, run_env
from dethpc.jobs.render import entrypoint_argv, is_launcher


def worker_pool_problem(cfg: ExperimentConfig, python: str) -> str:
    """'' when a worker can run this experiment's trials, else why not (one line)."""
    if is_launcher(entrypoint_argv(cfg.entrypoint, python)):
        return "entrypoint: a dethpc launcher (several processes per trial) cannot run in a pool"
    if cfg.slurm.components:
        return "slurm.components: heterogeneous trials cannot run in a pool"
    if cfg.resources.slots_per_trial > 1:
        return (f"resources.slots_per_trial: {cfg.resources.slots_per_trial}; "
                "a pool worker runs one single-process trial at a time (1 allowed)")
    return ""


def work_item(cfg: ExperimentConfig, cluster: ClusterConfig, *, backend: BackendKind | str,
              python: str, run_dir: Path, exp_id: int, trial_id: int, seq: int) -> WorkItem:
    """Run trial ``trial_id`` (its ``seq``-th item) as its job script would, minus the
    batch shell: the worker is the job, so no ``srun`` step. With an image the worker
    itself runs inside it (``worker_array_script``), so the item is the command as it
    runs in the image, without the runtime's prefix: the image's python runs it warm."""
    paths = ExperimentPaths(run_dir)
    tp = paths.trial(trial_id)
    env = run_env(cfg, cluster, backend=backend, run_dir=run_dir, exp_id=exp_id,
                  trial_id=trial_id)
    argv = entrypoint_argv(cfg.entrypoint, python)
    if in_image(cfg, cluster, cfg.resources.resource_pool):
        argv = inside(cluster, argv)
    return WorkItem(trial_id=trial_id, seq=seq, argv=argv, env=dict(env),
                    cwd=str(paths.context), trial_dir=str(tp.root))
