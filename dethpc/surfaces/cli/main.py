"""The ``dethpc`` command: a typer app that parses, calls the library and prints.

Owns: the command tree and the one place where an expected failure
(``DethpcError``) becomes a message and a non-zero exit code, without a traceback.
Must not: hold logic that the library lacks.
"""

from __future__ import annotations

import sys

import typer

from dethpc.common.errors import DethpcError
from dethpc.common.version import __version__
from dethpc.surfaces.cli.admin_cmd import admin_app
from dethpc.surfaces.cli.common import ENV, err_console
from dethpc.surfaces.cli.daemon_cmd import daemon_app
from dethpc.surfaces.cli.experiment_cmd import create, experiment_app
from dethpc.surfaces.cli.interactive_cmd import cmd_app, notebook_app, shell_app
from dethpc.surfaces.cli.task_cmd import task_app, tensorboard_app
from dethpc.surfaces.cli.trial_cmd import checkpoint_app, render, trial_app

app = typer.Typer(name="dethpc", no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Determined-style deep-learning experiments on Slurm.")
app.add_typer(experiment_app, name="experiment")
app.add_typer(experiment_app, name="e", hidden=True)
app.add_typer(trial_app, name="trial")
app.add_typer(trial_app, name="t", hidden=True)
app.add_typer(checkpoint_app, name="checkpoint")
app.add_typer(daemon_app, name="daemon")
app.add_typer(admin_app, name="admin")
app.add_typer(tensorboard_app, name="tensorboard")
app.add_typer(task_app, name="task")
app.add_typer(shell_app, name="shell")
app.add_typer(notebook_app, name="notebook")
app.add_typer(cmd_app, name="cmd")
app.command("submit", help="Alias of `experiment create`.")(create)
app.command("render")(render)


def _optional_apps() -> None:
    try:
        from dethpc.surfaces.cli.config_cmd import config_app

        app.add_typer(config_app, name="config")
    except ImportError:  # pragma: no cover - during development only
        pass
    try:
        from dethpc.surfaces.cli.dev_cmd import dev_app

        app.add_typer(dev_app, name="dev")
    except ImportError:  # pragma: no cover
        pass


_optional_apps()


def _sbatch_command() -> None:
    """``dethpc sbatch`` (and ``--search``): sbatch's own words, so no typer options."""
    from dethpc.surfaces.cli.sbatch_cmd import sbatch

    app.command("sbatch", add_help_option=False, context_settings={
        "allow_extra_args": True, "ignore_unknown_options": True,
        "allow_interspersed_args": False})(sbatch)


_sbatch_command()


def _job_api() -> None:
    """The job API's verbs (``dethpc.launch.jobapi``; the console script runs them without
    this app, see ``dethpc.surfaces.entry``)."""
    from dethpc.surfaces.cli.jobapi_cmd import register

    register(app)


_job_api()


@app.command("remote-tree", hidden=True, context_settings={
    "allow_extra_args": True, "ignore_unknown_options": True,
    "allow_interspersed_args": False})
def _remote_tree(ctx: typer.Context, area: str, manifest: str) -> None:
    """The login node's side of a remote submit: build the uploaded tree, then run the
    submit that names it (docs/remote.md)."""
    from dethpc.surfaces.remote.cli import remote_tree

    remote_tree(area, manifest, list(ctx.args), app)


def _dashboard_command() -> None:
    """``dethpc dashboard`` (its web library is imported only when it runs)."""
    from dethpc.surfaces.cli.dashboard_cmd import dashboard

    app.command("dashboard")(dashboard)


_dashboard_command()


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context, cluster_config: str = typer.Option(
        None, "--cluster-config", envvar="DETHPC_CLUSTER_CONFIG",
        help="cluster config YAML (default /etc/dethpc/cluster.yaml, else built-in local)"),
        version: bool = typer.Option(False, "--version"),
        remote: str = typer.Option(None, "--remote", help="run on the login node over SSH: "
                                   "[user@]host[:port], or off (docs/remote.md)")) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:  # options but no command: as click says it
        typer.echo(ctx.get_help(), err=True)
        raise typer.Exit(2)
    ENV.cluster_path = cluster_config


def main() -> None:
    try:
        from dethpc.surfaces.remote.cli import maybe_forward

        forwarded = maybe_forward(sys.argv[1:])
        if forwarded is not None:
            sys.exit(forwarded)
        app()
    except DethpcError as exc:
        err_console.print("[red]error:[/]", end=" ")
        err_console.print(str(exc), markup=False, highlight=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the database's own errors, said plainly
        from sqlalchemy.exc import OperationalError

        if not (isinstance(exc, OperationalError) or _refused_by_policy(exc)):
            raise
        from dethpc.store.sqlite import busy_timeout_s

        err_console.print("[red]error:[/]", end=" ")
        err_console.print(_database_message(exc, busy_timeout_s()), markup=False,
                          highlight=False)
        sys.exit(1)


def _refused_by_policy(exc: Exception) -> bool:
    """PostgreSQL refused for want of privilege (SQLSTATE 42501: a grant missing, or a
    row-level security policy of a shared database: another user's row)."""
    return getattr(getattr(exc, "orig", None), "sqlstate", None) == "42501"


def _database_message(exc: Exception, waited_s: float) -> str:
    """What to say when the database refused (busy, locked, unreachable); nothing was
    changed: the transaction was rolled back."""
    words = str(getattr(exc, "orig", None) or exc).strip()
    if "locked" in words or "busy" in words:
        return (f"the database is locked by another process (waited {waited_s:.0f} s: "
                f"{words}); nothing was changed. Try again, or raise "
                "DETHPC_DB_BUSY_TIMEOUT_S; a long-running `sqlite3` shell or backup on "
                "the file can hold it")
    return f"the database refused the request ({words}); nothing was changed"


if __name__ == "__main__":
    main()
