"""The batch script of a pool's worker array: K long-lived workers, one per task.

Each task runs ``python -m dethpc.launch.worker`` under a small batch shell that forwards
the pool's preemption signal (Slurm sends it to the batch shell, ``--signal=B:``)
and TERM to the worker, and requeues the task (``scontrol requeue``) when the
worker exits 85 after handing its lease back (on the local backend, the 85 itself
asks for the requeue). The directives are a trial's (``trial_directives``): the
same partition, shape, time limit and signal as a per-trial job. When the experiment
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
from dethpc.config.model import ClusterConfig, ExperimentConfig, RequeueMode
from dethpc.jobs.directives import trial_directives
from dethpc.jobs.jobscript import batch_comment, batch_name, container_prefix
from dethpc.jobs.render import shjoin
from dethpc.launch.worker.queue import PoolPaths


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
    paths = PoolPaths.of_run_dir(run_dir)
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
    requeue = traits_of(backend).requeue_in_place
    lines = ["#!/bin/bash", *(f"#SBATCH {d}" for d in directives),
             f"# dethpc: pool worker array of experiment {exp_id} (docs/searchers.md)",
             f"export {ENV_PREEMPT_SIGNAL}={pool.signal}",
             f"{shjoin(worker)} &",
             "child=$!",
             f"trap 'kill -s {pool.signal} \"$child\" 2>/dev/null' {pool.signal}",
             "trap 'kill -s TERM \"$child\" 2>/dev/null' TERM",
             "while :; do",
             '  wait "$child"; rc=$?',
             '  if [ "$rc" -gt 128 ] && kill -0 "$child" 2>/dev/null; then continue; fi',
             "  break",
             "done"]
    # the requeue decision is dethpc.launch.run_end's, as every job script's: a worker
    # that handed its lease back on a signal (exit 85) requeues this task alone while
    # Slurm still has it RUNNING (its early signal: a time limit or a preemption's
    # grace); a scancel'd worker (CANCELLED) ends, and a preemption Slurm requeues
    # itself is Slurm's. On the local backend the 85 itself asks for the requeue.
    if not requeue:
        return "\n".join([*lines, 'exit "$rc"']) + "\n"
    lines += ['reason=error; requeue=0; exit_code=$rc; job_state=""',
              # as _run_end.j2: a signal now must not kill the decision mid-record
              f"trap '' TERM {pool.signal}",
              f'eval "$({shjoin([python, "-m", "dethpc.launch.run_end", "--kind", "worker"])}'
              ' --rc "$rc")"',
              'if [ "$requeue" = 1 ]; then',
              '  scontrol requeue "$JOB_REF" || echo "dethpc: requeue of $JOB_REF failed" >&2',
              f'elif [ "$rc" -eq {LOCAL_REQUEUE_EXIT} ] && [ -n "$job_state" ]; then',
              '  echo "dethpc: worker stopped by a signal; job state $job_state: not requeued" >&2',
              "fi",
              'exit "$exit_code"']
    return "\n".join(lines) + "\n"
