"""A trial's job script and array script, from config to text.

Owns: turning (experiment config, cluster config, backend, ids, run directory)
into the exact scripts that are submitted: the command (entrypoint, ``srun``
for a plain entrypoint on Slurm, the container wrapper), the environment, the
directives. Used by the daemon (which writes and submits) and by
``dethpc render`` (which prints), so what is shown is what is run.
Must not: write files or submit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import jinja2

from dethpc.common.jobenv import ENV_CONTAINER_EXEC, ENV_CONTAINER_PYTHON
from dethpc.common.paths import ExperimentPaths, shared_checkpoint_dir
from dethpc.common.traits import BackendKind, traits_of
from dethpc.config.model import ClusterConfig, ExperimentConfig, HetComponent
from dethpc.jobs.containers import exec_argv
from dethpc.jobs.directives import component_directives, job_time, trial_directives
from dethpc.jobs.render import (
    TrialScript,
    entrypoint_argv,
    is_launcher,
    render_array_script,
    render_trial_script,
    startup_hook_argv,
    trial_env,
)

SRUN_ONE = ["srun", "--ntasks=1", "--nodes=1", "--kill-on-bad-exit=1"]


def trial_checkpoint_dir(cfg: ExperimentConfig, run_dir: Path, exp_id: int,
                         trial_id: int) -> Path:
    """Where the daemon puts a trial's checkpoints: under ``checkpoint_storage.path`` when the
    config names one, else the trial directory's (the job finds it in
    ``$DETHPC_CHECKPOINT_DIR``: ``dethpc.core._info.checkpoint_dir``)."""
    if cfg.checkpoint_storage.path is not None:
        return shared_checkpoint_dir(Path(cfg.checkpoint_storage.path), exp_id, trial_id)
    return ExperimentPaths(run_dir).trial(trial_id).checkpoints


def _image(cfg: ExperimentConfig, cluster: ClusterConfig, pool_name: str | None
           ) -> tuple[str, bool] | None:
    """The experiment's image for a pool and whether the pool has GPUs (None: no
    container: no image, or the site's runtime is ``none``)."""
    if not cfg.environment.image or cluster.containers.runtime == "none":
        return None
    gpu = bool(cluster.pool(pool_name).gres)
    image = (cfg.environment.image_gpu or cfg.environment.image) if gpu \
        else cfg.environment.image
    return image, gpu


def _binds(cfg: ExperimentConfig, run_dir: Path) -> list[str]:
    """Host paths a trial's container needs at the same path: the run directory (the
    context, the trial directories, the config) and the checkpoint storage."""
    binds = [str(run_dir)]
    if cfg.checkpoint_storage.path is not None:
        binds.append(str(cfg.checkpoint_storage.path))
    return binds


def in_image(cfg: ExperimentConfig, cluster: ClusterConfig, pool_name: str | None) -> bool:
    """Whether the experiment's trials run in a container (an image and a runtime)."""
    return _image(cfg, cluster, pool_name) is not None


def container_prefix(cfg: ExperimentConfig, cluster: ClusterConfig, pool_name: str | None,
                     run_dir: Path) -> list[str] | None:
    """What goes before a command to run it in the experiment's image (None: none)."""
    found = _image(cfg, cluster, pool_name)
    if found is None:
        return None
    image, gpu = found
    return exec_argv(cluster.containers, image, [], binds=_binds(cfg, run_dir),
                     mounts=cfg.bind_mounts, gpu=gpu,
                     env_names=list(cfg.environment.environment_variables)
                     + list(cfg.environment.environment_variables_gpu or {}))


def inside(cluster: ClusterConfig, argv: list[str]) -> list[str]:
    """``argv`` as it runs in the image: an entrypoint's ``python``/``python3`` is the
    image's python (``containers.python``)."""
    if argv and argv[0] in ("python", "python3"):
        return [cluster.containers.python, *argv[1:]]
    return argv


def _contained(cfg: ExperimentConfig, cluster: ClusterConfig, argv: list[str],
               pool_name: str | None, run_dir: Path) -> list[str]:
    """``argv`` inside the experiment's image when a container runtime is configured."""
    prefix = container_prefix(cfg, cluster, pool_name, run_dir)
    return argv if prefix is None else [*prefix, *inside(cluster, argv)]


def launcher_env(cfg: ExperimentConfig, cluster: ClusterConfig, backend: BackendKind | str,
                 run_dir: Path) -> dict[str, str]:
    """A dethpc launcher on Slurm runs on the host and starts each task (``srun``) in
    the image: it reads the prefix and the image's python from these variables."""
    raw = entrypoint_argv(cfg.entrypoint, "python3")
    prefix = container_prefix(cfg, cluster, cfg.resources.resource_pool, run_dir)
    if prefix is None or not traits_of(backend).srun_steps or not is_launcher(raw):
        return {}
    return {ENV_CONTAINER_EXEC: json.dumps(prefix),
            ENV_CONTAINER_PYTHON: cluster.containers.python}


def trial_command(cfg: ExperimentConfig, cluster: ClusterConfig, backend: BackendKind | str,
                  python: str, run_dir: Path) -> list[str]:
    traits = traits_of(backend)
    raw = entrypoint_argv(cfg.entrypoint, python)
    if traits.srun_steps and is_launcher(raw):
        # a dethpc launcher (also behind wrappers such as numactl) calls srun itself; with
        # an image it stays on the host and starts each task in the image
        # (``launcher_env``: srun ... <runtime> exec ... python -m dethpc.launch._worker)
        argv = raw
    else:
        argv = _contained(cfg, cluster, raw, cfg.resources.resource_pool, run_dir)
        if traits.srun_steps:
            argv = [*SRUN_ONE, *argv]
    components = cfg.slurm.components if traits.het_jobs else ()
    if components:
        waits = [a for c in components if c.ready != "none"
                 for a in ("--wait", f"{c.name}:{c.ready}:{c.ready_timeout_s}")]
        argv = [python, "-m", "dethpc.launch.hetjob", "--trial", *waits, "--", *argv]
    return argv


def component_step(cfg: ExperimentConfig, cluster: ClusterConfig, comp: HetComponent,
                   group: int, python: str, run_dir: Path) -> list[str]:
    """The ``srun`` starting every task of het group ``group`` (component ``comp``), its
    shape spelled out: the batch shell's ``SLURM_NTASKS`` and ``SLURM_NTASKS_PER_NODE``
    are the trial's (group 0), and Slurm 25.11's srun applies them to ``--het-group=1``
    too ("More processors requested than permitted"); 22.05 read the group's own."""
    argv = _contained(cfg, cluster, entrypoint_argv(comp.entrypoint, python),
                      comp.resource_pool or cfg.resources.resource_pool, run_dir)
    return ["srun", f"--het-group={group}", f"--nodes={comp.nodes}",
            f"--ntasks={comp.nodes * comp.tasks_per_node}",
            f"--ntasks-per-node={comp.tasks_per_node}", f"--cpus-per-task={comp.cpus_per_task}",
            "--kill-on-bad-exit=1", python, "-m",
            "dethpc.launch.hetjob", "--component", comp.name, "--", *argv]


def run_env(cfg: ExperimentConfig, cluster: ClusterConfig, *, backend: BackendKind | str,
            run_dir: Path, exp_id: int, trial_id: int,
            extra: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The environment of one run of trial ``trial_id``: what its job script exports, and
    what a pool worker gives the trial it runs."""
    paths = ExperimentPaths(run_dir)
    return trial_env(cfg, cluster, cluster.pool(cfg.resources.resource_pool),
                     experiment_id=exp_id, trial_id=trial_id,
                     trial_dir=paths.trial(trial_id).root, context_dir=paths.context,
                     checkpoint_dir=trial_checkpoint_dir(cfg, run_dir, exp_id, trial_id),
                     config_path=paths.config, backend=traits_of(backend).name, extra=extra)


def trial_script(cfg: ExperimentConfig, cluster: ClusterConfig, *, backend: BackendKind | str,
                 python: str, run_dir: Path, exp_id: int, trial_id: int,
                 jenv: jinja2.Environment | None = None) -> str:
    traits = traits_of(backend)
    paths = ExperimentPaths(run_dir)
    tp = paths.trial(trial_id)
    pool = cluster.pool(cfg.resources.resource_pool)
    env = run_env(cfg, cluster, backend=backend, run_dir=run_dir, exp_id=exp_id,
                  trial_id=trial_id, extra=launcher_env(cfg, cluster, backend, run_dir))
    directives = trial_directives(cfg, pool, name=f"dethpc-e{exp_id}-t{trial_id}",
                                  comment=f"dethpc:exp={exp_id}:trial={trial_id}",
                                  output=str(tp.root / "slurm-%j.out"))
    components = cfg.slurm.components if traits.het_jobs else ()
    for comp in components:
        directives += component_directives(
            comp, cluster.pool(comp.resource_pool or cfg.resources.resource_pool),
            job_time(cfg, pool))
    return render_trial_script(TrialScript(
        experiment_id=exp_id, trial_id=trial_id, traits=traits, directives=directives,
        trial_dir=tp.root, context_dir=paths.context,
        command=trial_command(cfg, cluster, backend, python, run_dir), env=env,
        python=python, signal=pool.signal, signal_grace_s=pool.signal_grace_s,
        hook_command=_contained(cfg, cluster, startup_hook_argv(tp.startup_hook_env),
                                cfg.resources.resource_pool, run_dir),
        hook_env=tp.startup_hook_env,
        component_names=tuple(c.name for c in components),
        component_steps=[component_step(cfg, cluster, c, group, python, run_dir)
                         for group, c in enumerate(components, 1)]), jenv)


def instance_tag(database_url: str) -> str:
    """A short tag of the database: two dethpc installations (or test databases) of one
    user never share job names, so adoption by name can never take another's job.

    The password is left out of what is hashed: rotating a PostgreSQL password must not
    rename the daemon's next jobs (the URL is parsed as SQLAlchemy does; a URL it cannot
    parse is hashed as given, so a SQLite path keeps the tag it always had)."""
    import hashlib

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        key = make_url(database_url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        key = database_url
    return hashlib.sha256(key.encode()).hexdigest()[:6]


def batch_name(exp_id: int, batch_id: int, tag: str = "") -> str:
    return f"dethpc-{tag}-e{exp_id}-b{batch_id}" if tag else f"dethpc-e{exp_id}-b{batch_id}"


def batch_comment(exp_id: int, batch_id: int, tag: str = "") -> str:
    return f"dethpc:db={tag}:exp={exp_id}:batch={batch_id}"


def array_script(cfg: ExperimentConfig, cluster: ClusterConfig, *, run_dir: Path, exp_id: int,
                 batch_id: int, tasks: list[tuple[int, Path]], tag: str = "",
                 jenv: jinja2.Environment | None = None) -> str:
    pool = cluster.pool(cfg.resources.resource_pool)
    paths = ExperimentPaths(run_dir)
    directives = trial_directives(cfg, pool, name=batch_name(exp_id, batch_id, tag),
                                  comment=batch_comment(exp_id, batch_id, tag),
                                  output=str(paths.arrays / "slurm-%A_%a.out"))
    return render_array_script(experiment_id=exp_id, batch_id=batch_id, directives=directives,
                               tasks=tasks, jenv=jenv)
