"""The batch script of a pool's worker array: K long-lived workers, one per task.

Each task runs ``python -m dethpc.launch.worker`` under a small batch shell
(sbatch_templates/pool_worker.sbatch.j2) that forwards the pool's preemption signal
(Slurm sends it to the batch shell, ``--signal=B:``) and TERM to the worker, and ends
its run with the same macros as every job script (``_run_end.j2``: the wait, the
decision of ``dethpc.launch.run_end``, the requeue): the task requeues itself
(``scontrol requeue``) when the worker exits 85 after handing its lease back while
Slurm still runs it (on the local backend, the 85 itself asks for the requeue). The
directives are a trial's (``trial_directives``): the same partition, shape, time limit
and signal as a per-trial job. When the experiment
runs in an image, the worker itself runs inside it (the same runtime command, binds and
passed environment as a trial's job, ``dethpc.jobs.jobscript.container_prefix``) under the
image's python (``containers.python``), so its trials start warm in the image; the
batch shell, the signal forwarding and the requeue stay on the host.

Owns: ``worker_array_script`` and the worker's job name/comment.
Must not: write or submit the script (the daemon side does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dethpc.common.exitcodes import LOCAL_REQUEUE_EXIT
from dethpc.common.jobenv import ENV_PREEMPT_SIGNAL
from dethpc.common.traits import BackendKind, traits_of
from dethpc.common.worker_queue import WorkerPoolPaths
from dethpc.config.model import ClusterConfig, ExperimentConfig, RequeueMode
from dethpc.jobs.directives import trial_directives
from dethpc.jobs.jobscript import batch_comment, batch_name, container_prefix
from dethpc.jobs.render import make_env

#: the worker array's template (its run's end: ``_run_end.j2``, as every job script's)
TEMPLATE = "pool_worker.sbatch.j2"


def pool_name(exp_id: int, batch_id: int = 0, tag: str = "") -> str:
    """The worker array's job name: its batch's name with ``-pool`` (adoption finds a
    worker array a crash left unrecorded by it)."""
    return f"{batch_name(exp_id, batch_id, tag)}-pool"


def pool_comment(exp_id: int, batch_id: int = 0, tag: str = "") -> str:
    return f"{batch_comment(exp_id, batch_id, tag)}:pool"


def worker_array_script(cfg: ExperimentConfig, cluster: ClusterConfig, *,
                        backend: BackendKind | str, run_dir: Path, exp_id: int, python: str,
                        preload: Sequence[str] = (), heartbeat_s: float = 5.0,
                        idle_exit_s: float = 0.0, batch_id: int = 0, tag: str = "") -> str:
    # a worker's own failure is no trial's: its job keeps the plain --requeue (an
    # expedited one would be held after any non-zero exit, with no trial to decide)
    pool = replace(cluster.pool(cfg.resources.resource_pool), requeue=RequeueMode.NORMAL)
    paths = WorkerPoolPaths.of_run_dir(run_dir)
    directives = trial_directives(cfg, pool, name=pool_name(exp_id, batch_id, tag),
                                  comment=pool_comment(exp_id, batch_id, tag),
                                  output=str(paths.root / "slurm-%A_%a.out"))
    prefix = container_prefix(cfg, cluster, cfg.resources.resource_pool, run_dir)
    worker = [python if prefix is None else cluster.containers.python, "-m", "dethpc.launch.worker",
              "--run-dir", str(run_dir), "--heartbeat-s", f"{heartbeat_s:g}",
              "--preempt-signal", pool.signal]
    if idle_exit_s > 0:
        worker += ["--max-idle-s", f"{idle_exit_s:g}"]
    if preload:
        worker += ["--preload", ",".join(preload)]
    if prefix is not None:
        worker = [*prefix, *worker]
    return make_env().get_template(TEMPLATE).render(
        directives=directives, experiment_id=exp_id, preempt_env=ENV_PREEMPT_SIGNAL,
        signal=pool.signal, signal_grace_s=pool.signal_grace_s, pool_dir=str(paths.root),
        worker=worker, python=python, requeue_exit=LOCAL_REQUEUE_EXIT,
        requeue_in_place=traits_of(backend).requeue_in_place) + "\n"
