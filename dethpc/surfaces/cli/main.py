"""The ``dethpc`` command: a typer app that parses, calls the library and prints.

Owns: the command tree and the one place where an expected failure
(``DethpcError``) becomes a message and a non-zero exit code, without a traceback.
A command imports only its own group's module: ``main`` builds the tree with the group
the first word names (``app_for``; the whole tree for ``--help``, no word, or a word it
does not know), so ``dethpc experiment list`` never imports the daemon's, the admin's or
the interactive tasks' commands (issue 47). ``app`` is the whole tree, built on first use.
Must not: hold logic that the library lacks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import typer

from dethpc.common.errors import DethpcError
from dethpc.common.version import __version__
from dethpc.surfaces.cli.common import ENV, err_console, report_error

#: what ``dethpc`` says of itself in ``--help``
HELP = "Determined-style deep-learning experiments on Slurm."


def _experiment(app: typer.Typer) -> None:
    from dethpc.surfaces.cli.experiment_cmd import experiment_app

    app.add_typer(experiment_app, name="experiment")
    app.add_typer(experiment_app, name="e", hidden=True)


def _trial(app: typer.Typer) -> None:
    from dethpc.surfaces.cli.trial_cmd import trial_app

    app.add_typer(trial_app, name="trial")
    app.add_typer(trial_app, name="t", hidden=True)


def _checkpoint(app: typer.Typer) -> None:
    from dethpc.surfaces.cli.trial_cmd import checkpoint_app

    app.add_typer(checkpoint_app, name="checkpoint")


def _daemon(app: typer.Typer) -> None:
    from dethpc.surfaces.cli.daemon_cmd import daemon_app

    app.add_typer(daemon_app, name="daemon")


def _admin(app: typer.Typer) -> None:
    from dethpc.surfaces.cli.admin_cmd import admin_app

    app.add_typer(admin_app, name="admin")


def _tensorboard(app: typer.Typer) -> None:
    from dethpc.surfaces.cli.task_cmd import tensorboard_app

    app.add_typer(tensorboard_app, name="tensorboard")


def _task(app: typer.Typer) -> None:
    from dethpc.surfaces.cli.task_cmd import task_app

    app.add_typer(task_app, name="task")


def _interactive(name: str) -> Callable[[typer.Typer], None]:
    def add(app: typer.Typer) -> None:
        from dethpc.surfaces.cli import interactive_cmd

        app.add_typer(getattr(interactive_cmd, f"{name}_app"), name=name)
    return add


def _submit(app: typer.Typer) -> None:
    from dethpc.surfaces.cli.submit_cmd import create

    app.command("submit", help="Alias of `experiment create`.")(create)


def _render(app: typer.Typer) -> None:
    from dethpc.surfaces.cli.trial_cmd import render

    app.command("render")(render)


def _config(app: typer.Typer) -> None:
    try:
        from dethpc.surfaces.cli.config_cmd import config_app

        app.add_typer(config_app, name="config")
    except ImportError:  # pragma: no cover - during development only
        pass


def _dev(app: typer.Typer) -> None:
    try:
        from dethpc.surfaces.cli.dev_cmd import dev_app

        app.add_typer(dev_app, name="dev")
    except ImportError:  # pragma: no cover
        pass


def _sbatch(app: typer.Typer) -> None:
    """``dethpc sbatch`` (and ``--search``): sbatch's own words, so no typer options."""
    from dethpc.surfaces.cli.sbatch_cmd import sbatch

    app.command("sbatch", add_help_option=False, context_settings={
        "allow_extra_args": True, "ignore_unknown_options": True,
        "allow_interspersed_args": False})(sbatch)


def _job_api(app: typer.Typer) -> None:
    """The job API's verbs (``dethpc.launch.jobapi``; the console script runs them without
    this app, see ``dethpc.surfaces.entry``)."""
    from dethpc.surfaces.cli.jobapi_cmd import register

    register(app)


def _remote_tree_command(app: typer.Typer) -> None:
    @app.command("remote-tree", hidden=True, context_settings={
        "allow_extra_args": True, "ignore_unknown_options": True,
        "allow_interspersed_args": False})
    def _remote_tree(ctx: typer.Context, area: str, manifest: str) -> None:
        """The login node's side of a remote submit: build the uploaded tree, then run the
        submit that names it (docs/remote.md)."""
        from dethpc.surfaces.remote.cli import remote_tree

        remote_tree(area, manifest, list(ctx.args), full_app())


def _dashboard(app: typer.Typer) -> None:
    """``dethpc dashboard`` (its web library is imported only when it runs)."""
    from dethpc.surfaces.cli.dashboard_cmd import dashboard

    app.command("dashboard")(dashboard)


#: the command tree, in the order ``dethpc --help`` lists it: (first words, what adds
#: them). A command's module is imported only when the tree that runs needs it
#: (``app_for``): ``dethpc experiment list`` builds the experiment group alone.
GROUPS: list[tuple[tuple[str, ...], Callable[[typer.Typer], None]]] = [
    (("experiment", "e"), _experiment),
    (("trial", "t"), _trial),
    (("checkpoint",), _checkpoint),
    (("daemon",), _daemon),
    (("admin",), _admin),
    (("tensorboard",), _tensorboard),
    (("task",), _task),
    (("shell",), _interactive("shell")),
    (("notebook",), _interactive("notebook")),
    (("cmd",), _interactive("cmd")),
    (("submit",), _submit),
    (("render",), _render),
    (("config",), _config),
    (("dev",), _dev),
    (("sbatch",), _sbatch),
    ((), _job_api),
    (("remote-tree",), _remote_tree_command),
    (("dashboard",), _dashboard),
]
#: the root's options that take a value (the first command word comes after them)
_VALUE_OPTIONS = ("--cluster-config", "--remote")


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


def build(word: str | None = None) -> typer.Typer:
    """The app with the group that ``word`` names alone, or the whole tree (None, or a
    word no group has: click's own error then lists what there is)."""
    wanted = [add for words, add in GROUPS if word in words]
    app = typer.Typer(name="dethpc", no_args_is_help=True, pretty_exceptions_enable=False,
                      help=HELP)
    for add in wanted or [add for _, add in GROUPS]:
        add(app)
    app.callback(invoke_without_command=True)(_root)
    return app


def first_word(args: Sequence[str]) -> str | None:
    """The command word of ``args`` (after the root's options), or None when there is
    none or the root's own options decide (``--help``, ``--version``)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _VALUE_OPTIONS:
            i += 2
        elif arg.startswith("-"):
            if arg in ("--help", "--version") or not arg.startswith(
                    tuple(f"{o}=" for o in _VALUE_OPTIONS)):
                return None
            i += 1
        else:
            return arg
    return None


def app_for(args: Sequence[str]) -> typer.Typer:
    """The tree that runs ``args``: only the command group they name."""
    return build(first_word(args))


_full: typer.Typer | None = None


def full_app() -> typer.Typer:
    """The whole command tree (built once)."""
    global _full
    if _full is None:
        _full = build()
    return _full


def __getattr__(name: str) -> typer.Typer:
    """``app``: the whole tree, built on first use (tests drive it with CliRunner)."""
    if name == "app":
        return full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    try:
        from dethpc.surfaces.remote.cli import maybe_forward

        forwarded = maybe_forward(sys.argv[1:])
        if forwarded is not None:
            sys.exit(forwarded)
        app_for(sys.argv[1:])()
    except DethpcError as exc:
        report_error(exc)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the database's own errors, said plainly
        import sqlite3

        from sqlalchemy.exc import OperationalError

        # sqlite3's own: submit's rows without SQLAlchemy (dethpc.store.new_experiment)
        if not (isinstance(exc, (OperationalError, sqlite3.OperationalError))
                or _refused_by_policy(exc)):
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
