"""``dethpc config ...``: validate an experiment config, show the cluster config.

Owns: the ``config_app`` typer sub-app (``validate``, ``show-cluster``: the effective
cluster config, headed by its source and where this user's store is). The main
CLI mounts it with ``app.add_typer(config_app, name="config")``.
Must not: hold validation logic (``dethpc.config`` does); print tracebacks for
a ``ConfigError`` (every error is listed on stderr, exit code 2).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from dethpc.common.errors import ConfigError
from dethpc.config import (
    ClusterConfig,
    ExperimentConfig,
    cluster_to_dict,
    dump_config,
    flatten_hparams,
    load_cluster_config,
    load_experiment_config,
)

config_app = typer.Typer(
    help="Validate experiment configs and show the cluster config.",
    no_args_is_help=True,
)
_out = Console(soft_wrap=True)
_err = Console(stderr=True, soft_wrap=True)


def print_config_error(exc: ConfigError, console: Console = _err) -> None:
    """Every problem of a ConfigError, one per line, on ``console``."""
    console.print(f"[bold red]error:[/] {escape(exc.source)} is invalid "
                  f"({len(exc.errors)} error(s)):")
    for error in exc.errors:
        console.print(f"  [red]-[/] [bold]{escape(error.path or '<root>')}[/]: "
                      f"{escape(error.message)}")


def summary_lines(cfg: ExperimentConfig) -> list[str]:
    """The short human summary printed by ``validate``."""
    s = cfg.searcher
    length = f"{s.max_length.value} {s.max_length.unit.value}" if s.max_length else "-"
    names = ", ".join(flatten_hparams(cfg.hyperparameters)) or "(none)"
    lines = [
        f"name:            {cfg.name}",
        f"searcher:        {s.name} ({'minimize' if s.smaller_is_better else 'maximize'} "
        f"{s.metric})",
        f"max trials:      {s.max_trials}",
        f"max length:      {length}",
        f"hyperparameters: {names}",
    ]
    lines += [f"warning: {w}" for w in cfg.warnings]
    return lines


@config_app.command("validate")
def validate(
    file: Path = typer.Argument(..., help="Experiment config YAML."),
    config: list[str] = typer.Option(
        [], "--config", "-c", help="Override a field: key.sub=value (repeatable)."),
    show: bool = typer.Option(False, "--show", help="Also print the config with overrides."),
) -> None:
    """Validate an experiment config and print a summary (exit 2 when invalid)."""
    try:
        cfg = load_experiment_config(file, config)
    except ConfigError as exc:
        print_config_error(exc)
        raise typer.Exit(2) from None
    _out.print(f"[green]ok[/] {escape(str(file))} is valid")
    for line in summary_lines(cfg):
        style = "yellow" if line.startswith("warning:") else ""
        _out.print(escape(line), style=style, highlight=False)
    if show:
        _out.print(escape(dump_config(cfg.raw)), highlight=False, end="")


@config_app.command("show-cluster")
def show_cluster(
    path: Path | None = typer.Option(
        None, "--cluster-config", help="Cluster config file (default: $DETHPC_CLUSTER_CONFIG, "
        "~/.config/dethpc/cluster.yaml, /etc/dethpc/cluster.yaml, else what Slurm's answers "
        "imply on a login node, else built-in local defaults)."),
) -> None:
    """Print the effective cluster config as YAML to save and edit (exit 2 when invalid)."""
    from dethpc.surfaces.cli.common import ENV

    try:
        cfg = load_cluster_config(path) if path is not None else ENV.cluster
    except ConfigError as exc:
        print_config_error(exc)
        raise typer.Exit(2) from None
    _out.print(f"# source: {escape(cfg.source)}", highlight=False)
    _out.print(f"# store: {escape(store_line(cfg))}", highlight=False)
    shown = cluster_to_dict(cfg)
    if shown.get("database_url"):
        from dethpc.store.access import safe_url

        # the site file may hold a password; what is printed never does
        shown["database_url"] = safe_url(str(shown["database_url"]))
    _out.print(escape(dump_config(shown)), highlight=False, end="")


def store_line(cfg: ClusterConfig) -> str:
    """Where this user's store is for ``cfg`` (its URL with the password masked, or the
    SQLite file with its filesystem's type) and whether that is safe."""
    from dethpc.store.credentials import database_url
    from dethpc.store.location import default_url, locate

    try:
        url = database_url(cfg) or default_url()
    except ConfigError as exc:  # names the credentials file, never its contents
        return f"cannot tell: {'; '.join(e.message for e in exc.errors)}"
    return locate(url).describe()
