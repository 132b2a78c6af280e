"""``dethpc tensorboard start|list|stop`` and ``dethpc task list|logs|kill`` (the task
model, ``dethpc.surfaces.tasks``: TensorBoard, notebooks, shells, commands)."""

from __future__ import annotations

import time

import typer

from dethpc.common.errors import DethpcError
from dethpc.store.models import Task, TaskKind
from dethpc.surfaces.cli.common import ENV, JsonOpt, WideOpt, print_json, say, table
from dethpc.surfaces.layout import Col
from dethpc.surfaces.tasks import registry

tensorboard_app = typer.Typer(help="TensorBoard over experiments' metrics.",
                              no_args_is_help=True)
task_app = typer.Typer(help="Tasks: TensorBoard, notebooks, shells, commands.",
                       no_args_is_help=True)


@tensorboard_app.command("start")
def tb_start(
        experiments: list[int] = typer.Argument(..., metavar="EXP...",
                                                help="experiment ids"),
        trial: list[int] = typer.Option([], "--trial", "-t",
                                        help="only these trials (repeat)"),
        idle_timeout: float = typer.Option(60.0, "--idle-timeout", help=(
            "stop after this many minutes without an HTTP request (0: never)")),
        refresh: float = typer.Option(10.0, "--refresh", help=(
            "seconds between re-derivations of the event files while it runs")),
        slurm: bool = typer.Option(False, "--slurm", help=(
            "run it as a job of the cluster config's backend, Slurm or local (default: a "
            "background process on this node)")),
        partition: str = typer.Option("", "--partition", help="the --slurm job's partition"),
        json_out: bool = JsonOpt) -> None:
    """Serve the experiments' metrics with TensorBoard on an owner-only Unix socket."""
    from dethpc.surfaces.tasks import tensorboard

    if refresh <= 0:
        raise DethpcError(f"--refresh: {refresh:g} is not positive; allowed: seconds > 0")
    if idle_timeout < 0:
        raise DethpcError(f"--idle-timeout: {idle_timeout:g} is negative; allowed: "
                          "minutes >= 0 (0: never)")
    started = tensorboard.start(ENV.store, experiments, trial,
                                idle_timeout_s=idle_timeout * 60, refresh_s=refresh,
                                slurm=slurm, partition=partition, cluster=ENV.cluster)
    t = started.task
    if json_out:
        return print_json({**_row(t), "url": started.url, "ssh": started.ssh_line})
    where = (f"{registry.job_label(t)} on {t.host}" if t.job_ref
             else f"pid {t.pid} on {t.host}")
    typer.echo(f"TensorBoard task {t.id} ({where}) serves on {t.endpoint}")
    typer.echo("On your workstation, run:")
    typer.echo(f"  {started.ssh_line}")
    typer.echo(f"then open {started.url}")
    idle = f"{t.idle_timeout_s / 60:g} min" if t.idle_timeout_s else "never"
    typer.echo(f"It stops after {idle} without a request; `dethpc tensorboard stop {t.id}`.")


def _row(t: Task) -> dict[str, object]:
    return {"id": t.id, "kind": t.kind.value, "state": t.state.value, "owner": t.owner,
            "host": t.host, "pid": t.pid, "job": t.job_ref, "backend": t.backend,
            "endpoint": t.endpoint,
            "experiments": t.experiment_ids, "idle_timeout_s": t.idle_timeout_s,
            "created_at": t.created_at, "ended_at": t.ended_at, "message": t.message}


def _table(title: str, tasks: list[Task], wide: bool) -> None:
    now = time.time()
    table(title, [Col("id", keep=100), Col("kind", keep=60), Col("state", keep=95),
                  Col("exps", shrink=True, keep=70), Col("where", shrink=True, keep=80),
                  Col("age", keep=50), Col("endpoint", shrink=True, keep=90)],
          [[t.id, t.kind.value, t.state.value, ",".join(map(str, t.experiment_ids)),
            f"job {t.job_ref} {t.host}".strip() if t.job_ref else f"{t.host}:{t.pid}",
            f"{(now - t.created_at) / 60:.0f}m", t.endpoint] for t in tasks], wide=wide)


@tensorboard_app.command("list")
def tb_list(all_: bool = typer.Option(False, "--all", "-a", help="ended ones too"),
            json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """Your TensorBoard tasks (running, unless --all)."""
    tasks = registry.tasks(ENV.store, kind=TaskKind.TENSORBOARD, include_ended=all_)
    if json_out:
        return print_json([_row(t) for t in tasks])
    _table("TensorBoard", tasks, wide)


@tensorboard_app.command("stop")
def tb_stop(task_ids: list[int] = typer.Argument(..., metavar="TASK...")) -> None:
    """Stop TensorBoard tasks (the process, or the Slurm job, is gone on return)."""
    for task_id in task_ids:
        if registry.get(ENV.store, task_id).kind != TaskKind.TENSORBOARD:
            raise DethpcError(f"TASK: {task_id} is not a TensorBoard task; "
                              "use `dethpc task kill`")
        registry.kill(ENV.store, task_id)
        say(f"task {task_id} stopped")


@task_app.command("list")
def task_list(all_: bool = typer.Option(False, "--all", "-a", help="ended ones too"),
              json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """Your tasks of every kind (running, unless --all)."""
    tasks = registry.tasks(ENV.store, include_ended=all_)
    if json_out:
        return print_json([_row(t) for t in tasks])
    _table("Tasks", tasks, wide)


@task_app.command("kill")
def task_kill(task_ids: list[int] = typer.Argument(..., metavar="TASK...")) -> None:
    """Stop tasks of any kind (the process, or the Slurm job, is gone on return)."""
    for task_id in task_ids:
        registry.kill(ENV.store, task_id)
        say(f"task {task_id} stopped")


@task_app.command("logs")
def task_logs(task_id: int = typer.Argument(..., metavar="TASK"),
              follow: bool = typer.Option(False, "--follow", "-f", help=(
                  "keep printing until the task's job or process has ended"))) -> None:
    """A task's log: its job's output (TensorBoard: its server's log)."""
    import sys

    from dethpc.surfaces.tasks.logs import follow as follow_log
    from dethpc.surfaces.tasks.logs import log_path

    task = registry.get(ENV.store, task_id)
    path = log_path(task)
    if not task.work_dir or not (path.exists() or follow):
        raise DethpcError(f"TASK: task {task_id} has no log yet ({path})")

    def write(chunk: bytes) -> None:
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()

    def running() -> bool:
        return not task.state.is_terminal and registry.alive(task) is True

    try:
        follow_log(path, running, write, follow=follow)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
