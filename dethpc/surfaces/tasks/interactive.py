"""Shells, notebooks and one-off commands as jobs: the shared job builder.

Owns: reading a task's config (an experiment YAML or a Determined command/notebook/
shell config: only ``resources``, ``environment``, ``bind_mounts`` and ``slurm`` are
used; ``task_config``), the directives of a task's job (``task_directives``: exactly a
trial's placement and shape, but named ``dethpc-<kind>-<id>``, written to the task's
``job.log``, never requeued, no signal), its environment (``task_env``), the job script
(``render_script``: every value shell-quoted; it writes its command's exit code to
``registry.EXIT_FILE``), submitting it (``submit``: the script 0600 in the 0700 task
directory, through the one submission protocol, ``ledger``: the task's row recorded
first, then the backend the cluster config names, ``registry.backend``: Slurm, or the
local backend, which runs the same script as a process of this machine; a shell needs
Slurm, ``srun --overlap`` attaches to it) and waiting until it runs (``wait_running``).
The job's output goes to the task's ``job.log`` on either (``JobRequest.output``, besides
the script's ``--output`` directive). How it ended is
``registry.finish``. The per-kind parts (what the job runs, how the CLI attaches) are
in ``dethpc.surfaces.cli.interactive_cmd`` and ``dethpc.surfaces.tasks.nbserve``.
Must not: print (the CLI does) or open the store beyond ``dethpc.surfaces.tasks.registry``.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dethpc.backends.base import JobRequest
from dethpc.common.errors import ConfigError, DethpcError, FieldError
from dethpc.common.jobenv import (
    ENV_BACKEND,
    ENV_CONTEXT_DIR,
    ENV_SLOTS_PER_TRIAL,
    ENV_SOCKET_IFNAME,
    ENV_TASK_DIR,
    ENV_TASK_ID,
    ENV_TASK_KIND,
)
from dethpc.common.jobref import JobRef
from dethpc.common.traits import BackendKind, traits_of
from dethpc.common.version import __version__
from dethpc.config import parse_experiment_config
from dethpc.config._yaml import load_yaml_file
from dethpc.config.experiment import check_supported
from dethpc.config.model import ClusterConfig, ExperimentConfig, ResourcePool
from dethpc.control.snapshot import snapshot_context
from dethpc.jobs import directives
from dethpc.jobs.jobscript import container_prefix, inside
from dethpc.jobs.render import STARTUP_HOOK, shjoin, shquote, startup_hook_argv
from dethpc.store import Store
from dethpc.store.models import Task, TaskKind, TaskState
from dethpc.surfaces.tasks import ledger, logs, registry

#: the config sections a task uses
KEPT = ("resources", "environment", "bind_mounts", "slurm")
#: Determined command/notebook/shell fields (and an experiment's) a task ignores
IGNORED = (
    "entrypoint", "searcher", "hyperparameters", "idle_timeout", "notebook_idle_type",
    "work_dir", "description", "name", "labels", "checkpoint_storage", "max_restarts",
    "min_validation_period", "min_checkpoint_period", "records_per_epoch",
    "reproducibility", "data", "workspace", "project", "scheduling_unit",
    "perform_initial_validation", "profiling", "optimizations", "debug", "integrations",
    "log_policies", "retention_policy", "checkpoint_policy", "internal",
    "preemption_timeout", "tensorboard_storage", "data_layer", "security", "pbs",
    "tensorboard_args", "notebook_args",
)
#: the placeholder a task's synthetic experiment gets (validation only; never run)
_SYNTHETIC = {"entrypoint": "true",
              "searcher": {"name": "single", "metric": "loss",
                           "max_length": {"batches": 1}}}
#: files in the task directory
JOB_LOG = logs.log_name(TaskKind.COMMAND)
READY_FILE = "ready"
HOOK_ENV = "hook-env"
#: how often a shell's holder job looks for an attached step (seconds)
HOLDER_CHECK_S = 30


def load_task_config(path: str | Path | None) -> ExperimentConfig:
    """The task's config from a YAML file (None: the defaults: one slot, the default
    pool); file errors are reported as the experiment config's are."""
    if path is None:
        return task_config({})
    source = str(path)
    return task_config(load_yaml_file(path), source)


def task_config(raw: Any, source: str = "task config") -> ExperimentConfig:
    """Validate a task's config: ``KEPT`` sections are checked as an experiment's (same
    field paths), ``IGNORED`` ones dropped, anything else refused. Determined's command
    ``resources.slots`` is read as ``slots_per_trial`` when that is not set."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError([FieldError("", f"expected a mapping, got {type(raw).__name__}")],
                          source)
    unknown = [k for k in raw if k not in KEPT and k not in IGNORED]
    if unknown:
        allowed = ", ".join(KEPT)
        raise ConfigError([FieldError(str(k), f"unknown field; a task uses {allowed} "
                                              "(experiment fields are ignored)")
                           for k in unknown], source)
    kept = {k: copy.deepcopy(raw[k]) for k in KEPT if k in raw}
    res = kept.get("resources")
    if isinstance(res, dict) and "slots" in res:
        slots = res.pop("slots")
        res.setdefault("slots_per_trial", slots)
    cfg = parse_experiment_config({**_SYNTHETIC, **kept}, source)
    check_supported(cfg)     # what `submit` refuses (a managed sbatch option, ...)
    return cfg


def task_directives(cfg: ExperimentConfig, pool: ResourcePool, *, kind: TaskKind,
                    task_id: int, output: Path, comment: str = "") -> list[str]:
    """The task's job directives (``dethpc.jobs.directives.task_directives``), named
    ``dethpc-<kind>-<id>`` (``ledger.job_name``), with its record's comment (default
    ``dethpc:task=<id>``)."""
    return directives.task_directives(cfg, pool, name=ledger.job_name(kind, task_id),
                                      comment=comment or f"dethpc:task={task_id}",
                                      output=str(output))


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def task_env(cfg: ExperimentConfig, pool: ResourcePool, *, task_id: int, kind: TaskKind,
             work_dir: Path, context_dir: Path | None,
             backend: BackendKind = BackendKind.SLURM) -> list[tuple[str, str]]:
    """What a task's job exports: dethpc's (``DETHPC_TASK_ID``, ``DETHPC_BACKEND``: the
    backend it runs on, ``DETHPC_CONTEXT_DIR`` when there is a context, ...) then the
    config's ``environment_variables`` (the GPU ones on a GPU pool), names checked as a
    trial's are."""
    env = [(ENV_TASK_ID, str(task_id)), (ENV_TASK_KIND, kind.value),
           (ENV_TASK_DIR, str(work_dir)), (ENV_BACKEND, backend.value),
           (ENV_SLOTS_PER_TRIAL, str(cfg.resources.slots_per_trial))]
    if context_dir is not None:
        env.append((ENV_CONTEXT_DIR, str(context_dir)))
    if pool.socket_ifname:
        env.append((ENV_SOCKET_IFNAME, pool.socket_ifname))
    user_env = cfg.environment.environment_variables
    if pool.gres and cfg.environment.environment_variables_gpu is not None:
        user_env = cfg.environment.environment_variables_gpu
    env += list(user_env.items())
    for key, _ in env:
        if not _NAME.match(key):
            raise DethpcError(f"environment.environment_variables: {key!r} is not a valid "
                              "variable name; allowed: letters, digits and _, not first a digit")
    return env


@dataclass(frozen=True)
class Job:
    """One task's job: where it lives and what it runs."""

    kind: TaskKind
    task_id: int
    work_dir: Path
    #: the job's working directory: the context copy, else the submitting directory
    cwd: Path
    directives: list[str]
    env: list[tuple[str, str]]
    #: the job's main command (a shell's holder: empty; the script waits instead)
    command: list[str]
    #: how the startup hook runs (inside the image when there is one); empty: no hook
    hook_command: list[str]
    python_bin: str
    idle_timeout_s: int = 0


def render_script(job: Job) -> str:
    """The job script: directives, environment, cwd, the startup hook (its exports kept
    for the job and written to ``hook-env.0`` for a shell's steps), then the command (its
    exit code written to ``exit-code``) or, for a shell, the holder loop."""
    w = job.work_dir
    lines = ["#!/bin/bash", *(f"#SBATCH {d}" for d in job.directives),
             f"# dethpc {__version__}: {job.kind.value} task {job.task_id}; every value "
             "below is shell-quoted", "set -u", "umask 077",
             f"TASK_DIR={shquote(w)}"]
    lines += [f"export {k}={shquote(v)}" for k, v in job.env]
    lines += [f"export PATH={shquote(job.python_bin)}:\"$PATH\"",
              f"cd {shquote(job.cwd)} || {{ echo \"dethpc: cannot enter {job.cwd}\" >&2; "
              "exit 1; }"]
    if job.hook_command:
        env_file = shquote(w / HOOK_ENV)
        lines += [
            f"if [ -f {STARTUP_HOOK} ]; then",
            f"  rm -f {env_file}.*",
            f"  {shjoin(job.hook_command)} || {{ rc=$?; echo \"dethpc: {STARTUP_HOOK} "
            "failed (exit code $rc)\" >&2; printf '%d\\n' \"$rc\" >\"$TASK_DIR/"
            f"{registry.EXIT_FILE}\"; exit \"$rc\"; }}",
            f"  if [ -f {env_file}.0 ]; then",
            f"    while IFS= read -r -d '' kv; do export \"$kv\"; done <{env_file}.0",
            "  fi",
            "fi"]
    if job.kind == TaskKind.SHELL:
        lines += [
            f": >\"$TASK_DIR/{READY_FILE}\"",
            f"idle={job.idle_timeout_s}",
            "last=$(date +%s)",
            "trap 'exit 0' TERM",
            "while :; do",
            f"  sleep {HOLDER_CHECK_S} & wait $!",
            "  now=$(date +%s)",
            "  if squeue -h -s -j \"$SLURM_JOB_ID\" -o %i 2>/dev/null "
            "| grep -qv -e '\\.batch$' -e '\\.extern$'; then",
            "    last=$now",
            "  elif [ \"$idle\" -gt 0 ] && [ $((now - last)) -ge \"$idle\" ]; then",
            "    echo \"dethpc: no shell attached for $idle s; ending the allocation\"",
            "    exit 0",
            "  fi",
            "done", ""]
        return "\n".join(lines)
    lines += [
        f"{shjoin(job.command)} &",
        "child=$!",
        "trap 'kill -TERM \"$child\" 2>/dev/null' TERM",
        "while :; do",
        "  wait \"$child\"; rc=$?",
        "  if [ \"$rc\" -gt 128 ] && kill -0 \"$child\" 2>/dev/null; then continue; fi",
        "  break",
        "done",
        f"printf '%d\\n' \"$rc\" >\"$TASK_DIR/{registry.EXIT_FILE}.tmp\" "
        f"&& mv -f \"$TASK_DIR/{registry.EXIT_FILE}.tmp\" \"$TASK_DIR/{registry.EXIT_FILE}\"",
        "exit \"$rc\"", ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class Prepared:
    """A recorded task and its job, not yet submitted."""

    task: Task
    job: Job
    cfg: ExperimentConfig
    pool: ResourcePool
    prefix: list[str] | None
    #: its record (the task row, held until the job id is in it)
    record: ledger.TaskLedger
    #: whose command timeout and retries the job's sbatch runs under
    cluster: ClusterConfig | None = None
    #: the backend the job goes to (the cluster config's)
    backend: BackendKind = BackendKind.SLURM


def prepare(store: Store, cluster: ClusterConfig, kind: TaskKind, *,
            config: ExperimentConfig, pool_name: str | None, context: Path | None,
            command: Sequence[str] | Callable[[Path], Sequence[str]],
            idle_timeout_s: float = 0.0,
            warn: Callable[[str], None] = lambda _: None) -> Prepared:
    """Record the task, make its 0700 directory, copy the context, build its job
    (``command``: its argv, or a function of the task directory that returns it)."""
    backend = registry.backend_kind(cluster)
    if kind is TaskKind.SHELL and not traits_of(backend).srun_steps:
        raise DethpcError(
            f"`dethpc shell` attaches to a Slurm allocation with `srun --overlap`, which "
            f"the {backend.value} backend of the cluster config ({cluster.source}) cannot "
            "do; run `dethpc cmd run -- COMMAND` for a command in the task's environment, "
            "or `dethpc notebook start` for a terminal in JupyterLab, or use a cluster "
            "config with backend: slurm")
    name = pool_name or config.resources.resource_pool
    pool = cluster.pool(name)
    if pool.preemptible:
        warn(f"pool {pool.name!r} is preemptible: this {kind.value} may be preempted, and "
             "is then not requeued (it just ends)")
    if context is not None and not Path(context).is_dir():
        raise DethpcError(f"--context: {context} is not a directory")
    task, record = ledger.record(store, kind, [], idle_timeout_s, registry.task_dir,
                                 backend=backend)
    assert task.id is not None
    work_dir = Path(task.work_dir)
    for stale in (JOB_LOG, registry.EXIT_FILE, READY_FILE, "endpoint.json", "token"):
        (work_dir / stale).unlink(missing_ok=True)
    ctx_dir = None
    try:
        if context is not None:
            ctx_dir = work_dir / "context"
            if ctx_dir.exists():
                import shutil

                shutil.rmtree(ctx_dir)
            snapshot_context(Path(context), ctx_dir)
        prefix = container_prefix(config, cluster, pool.name, run_dir=work_dir)
        env = task_env(config, pool, task_id=task.id, kind=kind, work_dir=work_dir,
                       context_dir=ctx_dir, backend=backend)
        hook = startup_hook_argv(work_dir / HOOK_ENV)
        argv = list(command(work_dir) if callable(command) else command)
        if prefix is not None:
            hook = [*prefix, *hook]
            argv = [*prefix, *inside(cluster, argv)] if argv else []
        python = cluster.python or sys.executable
        job = Job(kind=kind, task_id=task.id, work_dir=work_dir,
                  cwd=ctx_dir if ctx_dir is not None else Path.cwd(),
                  directives=task_directives(config, pool, kind=kind, task_id=task.id,
                                             output=work_dir / JOB_LOG,
                                             comment=record.comment),
                  env=env, command=argv, hook_command=hook,
                  python_bin=str(Path(python).parent), idle_timeout_s=int(idle_timeout_s))
    except Exception as exc:
        record.reason = str(exc)[:500]
        record.give_back()
        raise
    return Prepared(task, job, config, pool, prefix, record, cluster, backend)


def submit(store: Store, prep: Prepared, extra_env: Mapping[str, str] | None = None) -> Task:
    """Write the script (0600) and submit it through the one submission protocol
    (``ledger.send``: recorded already, the job id confirmed in the task's row)."""
    record = prep.record
    script = prep.job.work_dir / f"{prep.job.kind.value}.sbatch"
    try:
        script.unlink(missing_ok=True)
        fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(render_script(prep.job))
    except OSError as exc:
        record.reason = f"cannot write {script}: {exc}"[:500]
        record.give_back()
        raise DethpcError(record.reason) from None
    ledger.send(record, registry.backend(prep.cluster, prep.backend), JobRequest(
        name=record.name, comment=record.comment, script=script, workdir=Path.cwd(),
        env=dict(extra_env or {}), output=prep.job.work_dir / JOB_LOG))
    return registry.get(store, prep.job.task_id)


def job_state(task: Task) -> tuple[str, str, str]:
    """(state, node list, pending reason) as the task's backend says; ("", "", "") once
    the job is no longer pending or running."""
    info = registry.job_info(task)
    if info is None or info.state.is_terminal:
        return "", "", ""
    return info.state.value.upper(), info.nodes, info.reason or "None"


def wait_running(task: Task, *, until: Callable[[], bool] = lambda: True,
                 on_pending: Callable[[str], None] = lambda _: None,
                 timeout_s: float | None = None, poll_s: float = 0.5) -> str:
    """Wait until the job runs and ``until()`` holds; its first node. Raises when the
    job ends first, or after ``timeout_s``."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    said = ""
    while True:
        state, nodes, reason = job_state(task)
        if not state:
            raise DethpcError(f"job {task.job_ref} ended before it was ready: "
                              f"{log_tail(Path(task.work_dir) / JOB_LOG)}")
        if state == "RUNNING" and until():
            from dethpc.common.hostlist import expand_hostlist

            return expand_hostlist(nodes)[0] if nodes else ""
        if state == "PENDING" and reason != said and reason != "None":
            said = reason
            on_pending(reason)
        if deadline is not None and time.monotonic() > deadline:
            raise DethpcError(f"job {task.job_ref} was not ready within {timeout_s:g} s "
                              f"(state {state}, {reason})")
        time.sleep(poll_s)


def cancel(store: Store, task: Task, message: str) -> Task:
    """Cancel the task's job through its backend and wait until it has left the queue."""
    with contextlib.suppress(DethpcError):   # already gone: nothing to cancel
        registry.task_backend(task).cancel([JobRef.parse(task.job_ref)])
    deadline = time.monotonic() + 60
    while registry.job_alive(task) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert task.id is not None
    return registry.update(store, task.id, state=TaskState.ENDED, message=message)


def log_tail(log: Path, lines: int = 5) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:]) \
            or "(empty log)"
    except OSError:
        return "(no log)"
