"""``dethpc shell start|open|list``, ``dethpc notebook start|list|stop`` and
``dethpc cmd run``: interactive work as jobs of the cluster config's backend (Slurm; the
local backend for notebooks and commands) (docs/interactive.md).

Owns: the commands' options (the shared ``--pool``, ``--config-file/--config`` and
``-c/--context``) and what they print; the jobs are built by ``dethpc.surfaces.tasks``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from dethpc.common.errors import DethpcError
from dethpc.config.model import ExperimentConfig
from dethpc.store.models import TaskKind
from dethpc.surfaces.cli.common import ENV, JsonOpt, WideOpt, print_json
from dethpc.surfaces.cli.task_cmd import _row, _table
from dethpc.surfaces.tasks import registry

shell_app = typer.Typer(help="Interactive shells in Slurm allocations.", no_args_is_help=True)
notebook_app = typer.Typer(help="JupyterLab in jobs (Slurm, or the local backend).",
                           no_args_is_help=True)
cmd_app = typer.Typer(help="One-off commands as jobs (Slurm, or the local backend).",
                      no_args_is_help=True)

PoolOpt = typer.Option(None, "--pool", "-p", help="resource pool (default: the config's "
                       "resources.resource_pool, else the cluster's default pool)")
ConfigOpt = typer.Option(None, "--config-file", "--config", help=(
    "an experiment YAML or a Determined command/notebook/shell config: its resources, "
    "environment, bind_mounts and slurm sections are used"))
ContextOpt = typer.Option(None, "--context", "-c", help=(
    "a directory copied into the task (.detignore honoured); the job runs in the copy "
    "(default: no copy; the job runs in the current directory)"))


def _err(text: str) -> None:
    typer.echo(text, err=True)


def _warn(text: str) -> None:
    _err(f"warning: {text}")


def _pending(reason: str) -> None:
    _err(f"waiting for the job to start ({reason})")


def _config(path: Path | None) -> ExperimentConfig:
    from dethpc.surfaces.tasks.interactive import load_task_config

    cfg = load_task_config(path)
    for w in cfg.warnings:
        _warn(w)
    return cfg


def _idle(minutes: float) -> float:
    if minutes < 0:
        raise DethpcError(f"--idle-timeout: {minutes:g} is negative; allowed: minutes >= 0 "
                          "(0: never)")
    return minutes * 60


# ----------------------------------------------------------------------------- cmd
@cmd_app.command("run")
def cmd_run(command: list[str] = typer.Argument(None, metavar="-- COMMAND...",
                                                help="the command and its arguments"),
            pool: str = PoolOpt, config_file: Path = ConfigOpt,
            context: Path = ContextOpt,
            detach: bool = typer.Option(False, "--detach", "-d", help=(
                "print the task and job ids and return (default: follow the job's log "
                "and exit with the command's exit code)"))) -> None:
    """Run COMMAND once as a batch job, with the context and the trials' environment."""
    from dethpc.surfaces.tasks import command as cmd

    task = cmd.start(ENV.store, ENV.cluster, config=_config(config_file), pool=pool,
                     context=context, argv=command or [], warn=_warn)
    if detach:
        typer.echo(f"command task {task.id}: {registry.job_label(task)}")
        return
    _err(f"command task {task.id}: {registry.job_label(task)}")

    def write(chunk: bytes) -> None:
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()

    try:
        task, code = cmd.follow(ENV.store, task, write)
    except KeyboardInterrupt:
        _err(f"\nstopped following; task {task.id} keeps running: `dethpc task logs "
             f"{task.id} --follow`, `dethpc task kill {task.id}`")
        raise typer.Exit(130) from None
    if task.state.value == "failed":
        _err(f"command task {task.id}: {task.message}")
    raise typer.Exit(code)


# --------------------------------------------------------------------------- shell
@shell_app.command("start")
def shell_start(command: list[str] = typer.Argument(None, metavar="[-- COMMAND...]", help=(
                    "run this instead of an interactive shell")),
                pool: str = PoolOpt, config_file: Path = ConfigOpt,
                context: Path = ContextOpt,
                idle_timeout: float = typer.Option(30.0, "--idle-timeout", help=(
                    "end the allocation after this many minutes with no shell attached "
                    "(0: at its time limit)")),
                keep: bool = typer.Option(False, "--keep", help=(
                    "keep the allocation when the shell exits (`dethpc shell open ID`)"))
                ) -> None:
    """Start a shell in a new allocation (the config's resources), attached here."""
    from dethpc.surfaces.tasks import shell

    task = shell.start(ENV.store, ENV.cluster, config=_config(config_file), pool=pool,
                       context=context, idle_timeout_s=_idle(idle_timeout), warn=_warn,
                       on_pending=_pending)
    _err(f"shell task {task.id}: {registry.job_label(task)} on {task.host}")
    _attach_then(task.id or 0, command or [], keep)


@shell_app.command("open")
def shell_open(task_id: int = typer.Argument(..., metavar="TASK"),
               command: list[str] = typer.Argument(None, metavar="[-- COMMAND...]"),
               keep: bool = typer.Option(True, "--keep/--end", help=(
                   "keep the allocation when the shell exits (default), or end it"))
               ) -> None:
    """Attach again to a kept shell's allocation."""
    _attach_then(task_id, command or [], keep)


def _attach_then(task_id: int, command: list[str], keep: bool) -> None:
    from dethpc.surfaces.tasks import interactive, shell

    task = registry.get(ENV.store, task_id)
    try:
        code = shell.attach(ENV.store, task, command)
    except KeyboardInterrupt:
        code = 130
    if keep:
        _err(f"shell task {task_id} kept: `dethpc shell open {task_id}`, "
             f"`dethpc task kill {task_id}`")
    else:
        interactive.cancel(ENV.store, task, f"the shell exited (code {code})")
    raise typer.Exit(code)


@shell_app.command("list")
def shell_list(all_: bool = typer.Option(False, "--all", "-a", help="ended ones too"),
               json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """Your shells (running, unless --all)."""
    _list(TaskKind.SHELL, "Shells", all_, json_out, wide)


# ------------------------------------------------------------------------ notebook
@notebook_app.command("start")
def notebook_start(context_arg: Path = typer.Argument(None, metavar="[CONTEXT]", help=(
                       "same as --context")),
                   pool: str = PoolOpt, config_file: Path = ConfigOpt,
                   context: Path = ContextOpt,
                   idle_timeout: float = typer.Option(60.0, "--idle-timeout", help=(
                       "stop after this many minutes without kernels, terminals or "
                       "requests (checked once a minute; 0: at the job's time limit)")),
                   json_out: bool = JsonOpt) -> None:
    """Start JupyterLab in a job (Slurm's, or the local backend's); prints the ssh tunnel
    and the URL with the token."""
    from dethpc.surfaces.tasks import notebook

    if context_arg is not None and context is not None:
        raise DethpcError("CONTEXT: give the context once (as CONTEXT or --context)")
    started = notebook.start(ENV.store, ENV.cluster, config=_config(config_file), pool=pool,
                             context=context or context_arg,
                             idle_timeout_s=_idle(idle_timeout), warn=_warn,
                             on_pending=_pending)
    t = started.task
    if json_out:
        return print_json({**_row(t), "token": started.token, "port": started.port,
                           "ssh": started.ssh_line, "url": started.url})
    typer.echo(f"notebook task {t.id}: JupyterLab in {registry.job_label(t)} on "
               f"{t.host}:{started.port}")
    typer.echo("On your workstation, run:")
    typer.echo(f"  {started.ssh_line}")
    typer.echo(f"then open {started.url}")
    idle = f"{t.idle_timeout_s / 60:g} min" if t.idle_timeout_s else "never"
    typer.echo(f"It stops when idle for {idle} (checked once a minute); "
               f"`dethpc notebook stop {t.id}`.")


@notebook_app.command("list")
def notebook_list(all_: bool = typer.Option(False, "--all", "-a", help="ended ones too"),
                  json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """Your notebooks (running, unless --all)."""
    _list(TaskKind.NOTEBOOK, "Notebooks", all_, json_out, wide)


@notebook_app.command("stop")
def notebook_stop(task_ids: list[int] = typer.Argument(..., metavar="TASK...")) -> None:
    """Stop notebooks (their jobs are gone on return)."""
    for task_id in task_ids:
        if registry.get(ENV.store, task_id).kind != TaskKind.NOTEBOOK:
            raise DethpcError(f"TASK: {task_id} is not a notebook task; "
                              "use `dethpc task kill`")
        registry.kill(ENV.store, task_id)
        typer.echo(f"task {task_id} stopped")


def _list(kind: TaskKind, title: str, all_: bool, json_out: bool, wide: bool) -> None:
    tasks = registry.tasks(ENV.store, kind=kind, include_ended=all_)
    if json_out:
        return print_json([_row(t) for t in tasks])
    _table(title, tasks, wide)
