"""``dethpc experiment ...`` (and ``dethpc submit``): thin wrappers over the library."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from dethpc.config import load_experiment_config
from dethpc.control import experiments
from dethpc.store.access import ADMIN_ROLE, Scope
from dethpc.store.models import ExperimentState
from dethpc.surfaces import views
from dethpc.surfaces.cli import show
from dethpc.surfaces.cli.common import (
    ENV,
    JsonOpt,
    WideOpt,
    console,
    err_console,
    fmt_metric,
    print_json,
    say,
    say_if_untracked,
    table,
)
from dethpc.surfaces.cli.daemon_cmd import catch_up_if_untracked
from dethpc.surfaces.cli.follow import _follow, _wait  # noqa: F401 (_follow: the tests')
from dethpc.surfaces.cli.shared import (
    TimeLimitOpt,
    WaitOpt,
    print_checkpoints,
    rehearse_targets,
    stream_trial_log,
)
from dethpc.surfaces.cli.show import KIND_WORDS, hparam_columns, straggler_text  # noqa: F401
from dethpc.surfaces.cli.submit_cmd import ConfigOpt, create
from dethpc.surfaces.layout import (
    Col,
)

experiment_app = typer.Typer(help="Create, watch and control experiments.", no_args_is_help=True)
label_app = typer.Typer(help="Add or remove experiment labels.", no_args_is_help=True)
experiment_app.add_typer(label_app, name="label")

experiment_app.command("create")(create)   # dethpc.surfaces.cli.submit_cmd


@experiment_app.command("list")
def list_(json_out: bool = JsonOpt, wide: bool = WideOpt,
          all_: bool = typer.Option(False, "--all", "-a",
                                    help="every user's experiments (default: only yours)"),
          active: bool = typer.Option(False, "--active", help="only those still running")
          ) -> None:
    """List your experiments (``--all``: everyone's, as Determined's ``det e list -a``;
    on a shared database only a dethpc admin sees other users' experiments)."""
    caught = catch_up_if_untracked()
    rows = views.list_experiments(ENV.store, include_ended=not active,
                                  owner=None if all_ else experiments.current_user())
    if all_ and ENV.store.role.scope is Scope.OWN_ROWS:
        err_console.print(f"note: --all shows only your experiments: your database role "
                          f"{ENV.store.role.name!r} is not a dethpc admin ({ADMIN_ROLE})",
                          markup=False, highlight=False)
    say_if_untracked([r["state"] for r in rows], read_now=caught is not None)
    show.experiment_list(rows, json_out=json_out, wide=wide)


@experiment_app.command("describe")
def describe(exp_id: int, json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """An experiment with every trial, its best validation metric and checkpoint."""
    caught = catch_up_if_untracked()
    d = views.describe_experiment(ENV.store, exp_id)
    say_if_untracked([d["state"]], read_now=caught is not None)
    show.experiment_describe(d, json_out=json_out, wide=wide)


@experiment_app.command("list-trials")
def list_trials(exp_id: int, json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """Trials of an experiment."""
    rows = views.describe_experiment(ENV.store, exp_id)["trials"]
    if json_out:
        return print_json(rows)
    base = [Col("trial", keep=100), Col("state", keep=90), Col("steps", keep=70),
            Col("best", keep=80), Col("latest checkpoint", shrink=True, keep=60),
            Col("restarts", keep=30), Col("exit", shrink=True, keep=35)]
    cols, cells = hparam_columns(
        base, [[t["id"], t["state"], t["steps_completed"], fmt_metric(t["best_validation"]),
                t["latest_checkpoint"], t["restarts"], t["exit_reason"]] for t in rows],
        [t["hparams"] for t in rows], wide=wide)
    table(f"Trials of experiment {exp_id}", cols, cells, wide=wide)


@experiment_app.command("list-checkpoints")
def list_checkpoints(exp_id: int, json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """Checkpoints of an experiment (deleted ones included, marked)."""
    print_checkpoints(exp_id, json_out=json_out, wide=wide)


@experiment_app.command("logs")
def logs(exp_id: int, follow: bool = typer.Option(False, "--follow", "-f"),
         tail: int = typer.Option(0, help="only the last N lines")) -> None:
    """The first trial's log, as Determined's ``det e logs`` (events: ``experiment events``)."""
    experiments.get_experiment(ENV.store, exp_id)  # a clear error for an unknown experiment
    while True:
        trials = experiments.trials_of(ENV.store, exp_id)
        if trials and trials[0].id is not None:
            return stream_trial_log(trials[0].id, follow=follow, tail=tail)
        state = ExperimentState(experiments.get_experiment(ENV.store, exp_id).state)
        if not follow or state.is_terminal:
            err_console.print(f"experiment {exp_id} has no trial yet ({state.value})",
                              highlight=False)
            return None
        time.sleep(0.5)


@experiment_app.command("plot")
def plot(exp_id: int, output: Path = typer.Option(
        None, "--output", "-o", help="FILE.png or FILE.svg (default: experiment-ID.png)")
         ) -> None:
    """Draw learning curves, ASHA's rungs and the metric against each hyperparameter
    (matplotlib: the `plots` extra; docs/observability.md)."""
    from dethpc.surfaces.plots import write_plot

    w = write_plot(ENV.store, exp_id, output or Path(f"experiment-{exp_id}.png"))
    typer.echo(f"wrote {w.path} ({w.trials} trials, {w.curves} curves, {w.brackets} ASHA "
               f"brackets, {w.hparams} hyperparameter plots)")  # one line: the path whole


@experiment_app.command("events")
def events(exp_id: int, json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """The experiment's event log (submissions, preemptions, restarts, stops); a message
    wraps at spaces (``--wide``: one line per event)."""
    rows = views.events_of(ENV.store, exp_id)
    if json_out:
        return print_json(rows)
    for e in rows:
        stamp = time.strftime("%H:%M:%S", time.localtime(e["time"]))
        trial = f"trial {e['trial_id']} " if e["trial_id"] else ""
        say(f"{stamp} {trial}{e['kind']} {e['message']}", wide=wide, hang=9)


def _state_command(action: str) -> None:
    def command(exp_id: int) -> None:
        state = experiments.request_state(ENV.store, exp_id, action)
        console.print(f"experiment {exp_id}: {state}")
    command.__doc__ = {"pause": "Checkpoint every trial and release its allocation.",
                       "activate": "Resume a paused experiment from its checkpoints.",
                       "cancel": "Ask every trial to checkpoint and exit; end the experiment.",
                       "kill": "scancel every job of the experiment now."}[action]
    experiment_app.command(action)(command)


for _action in ("pause", "activate", "cancel", "kill"):
    _state_command(_action)


@experiment_app.command("preempt")
def preempt(exp_id: int, time_limit: bool = TimeLimitOpt, wait: bool = WaitOpt) -> None:
    """Rehearse a preemption of every running trial (``dethpc trial preempt``)."""
    from dethpc.control.rehearse import experiment_targets

    rehearse_targets(experiment_targets(ENV.store, ENV.cluster, exp_id), time_limit, wait)


@experiment_app.command("unpause", hidden=True)
def unpause(exp_id: int) -> None:
    """Alias of `activate` (Determined's `det e unpause`)."""
    state = experiments.request_state(ENV.store, exp_id, "activate")
    console.print(f"experiment {exp_id}: {state}")


@experiment_app.command("config")
def show_config(exp_id: int) -> None:
    """The experiment's config as validated, overrides applied (``det e config``)."""
    typer.echo(experiments.get_experiment(ENV.store, exp_id).config_yaml, nl=False)


@experiment_app.command("set-concurrency")
def set_concurrency(exp_id: int, limit: int = typer.Argument(
        ..., help="max_concurrent_trials from now on (0 = no limit)")) -> None:
    """Change how many trials run at once; live arrays get the new ArrayTaskThrottle."""
    old = experiments.set_concurrency(ENV.store, exp_id, limit)
    console.print(f"experiment {exp_id}: max_concurrent_trials {old} -> {limit}")


@experiment_app.command("wait")
def wait_(exp_id: int, timeout: float = typer.Option(None, help="seconds")) -> None:
    """Wait until the experiment ends; exit 0 only if it COMPLETED."""
    state = _wait(exp_id, timeout)
    console.print(f"experiment {exp_id}: {state}")
    if state != ExperimentState.COMPLETED.value:
        raise typer.Exit(1)


@experiment_app.command("preview-search")
def preview_search(config_file: Path, config: list[str] = ConfigOpt,
                   json_out: bool = JsonOpt) -> None:
    """The trials and rung lengths the searcher would create (a table of 5 narrow
    columns: it fits 80 columns as it is)."""
    from dethpc.searchers.preview import preview_search as preview
    from dethpc.searchers.preview import render_preview

    cfg = load_experiment_config(config_file, config)
    result = preview(cfg.searcher, cfg.hyperparameters, cfg.experiment_seed)
    if json_out:
        return print_json(result)
    typer.echo(render_preview(result))


@label_app.command("add")
def label_add(exp_id: int, label: str) -> None:
    console.print(experiments.set_labels(ENV.store, exp_id, [label], []))


@label_app.command("remove")
def label_remove(exp_id: int, label: str) -> None:
    console.print(experiments.set_labels(ENV.store, exp_id, [], [label]))


# Determined's short spellings: det e ls / lt / lc
experiment_app.command("ls", hidden=True, help="Alias of `list`.")(list_)
experiment_app.command("lt", hidden=True, help="Alias of `list-trials`.")(list_trials)
experiment_app.command("lc", hidden=True, help="Alias of `list-checkpoints`.")(list_checkpoints)
