"""``dethpc experiment ...`` (and ``dethpc submit``): thin wrappers over the library."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from dethpc import experiments, service
from dethpc.cli import views
from dethpc.cli.common import ENV, console, err_console, fmt_metric, print_json, table
from dethpc.config import load_experiment_config
from dethpc.errors import DethpcError
from dethpc.paths import ExperimentPaths
from dethpc.store.models import ExperimentState

experiment_app = typer.Typer(help="Create, watch and control experiments.", no_args_is_help=True)
label_app = typer.Typer(help="Add or remove experiment labels.", no_args_is_help=True)
experiment_app.add_typer(label_app, name="label")

ConfigOpt = typer.Option([], "--config", "-c", help="Override a config field: key.sub=value")


def create(
    config_file: Path = typer.Argument(..., help="experiment config (YAML)"),
    context: Path = typer.Argument(..., help="model directory to snapshot"),
    config: list[str] = ConfigOpt,
    no_daemon: bool = typer.Option(False, "--no-daemon", help="do not start the daemon"),
    follow: bool = typer.Option(False, "--follow", "-f", help="stream the first trial's log"),
    wait: bool = typer.Option(False, "--wait", help="wait until the experiment ends"),
    local: bool = typer.Option(False, "--local", help="run in this process (with --test)"),
    test: bool = typer.Option(False, "--test", help="one batch, one validation, one checkpoint"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Validate the config, snapshot the model directory and record the experiment."""
    cfg = load_experiment_config(config_file, config)
    for w in cfg.warnings:
        err_console.print(f"[yellow]warning:[/] {w}")
    if local or test:
        if not (local and test):
            raise DethpcError("--local and --test go together (Determined's habit): "
                              "`dethpc submit --local --test CONFIG DIR`")
        from dethpc.pytorch import run_test_mode
        from dethpc.searchers.base import Create
        from dethpc.searchers.factory import make_searcher

        first = next(a for a in make_searcher(cfg.searcher, cfg.hyperparameters,
                                              cfg.experiment_seed).initial()
                     if isinstance(a, Create))
        code = run_test_mode(cfg.entrypoint, context, first.hparams, experiment_config=cfg.raw)
        console.print(f"test mode {'passed' if code == 0 else f'failed (exit code {code})'}")
        raise typer.Exit(code)
    exp_id = experiments.create_experiment(ENV.store, ENV.cluster, cfg, context, ENV.backend)
    if json_out:
        print_json({"id": exp_id})
    else:
        console.print(f"Created experiment {exp_id} ({cfg.name})")
    if not no_daemon:
        pid = service.start()
        if not json_out:
            console.print(f"daemon running (pid {pid}); log: {service.log_path()}")
    if follow:
        _follow(exp_id)
    elif wait:
        _wait(exp_id, None)


def _follow(exp_id: int) -> None:
    """Stream the first trial's log until the experiment ends."""
    offset, current = 0, None
    while True:
        exp = experiments.get_experiment(ENV.store, exp_id)
        trials = experiments.trials_of(ENV.store, exp_id)
        if trials and trials[0].id is not None:
            logs = ExperimentPaths(Path(exp.run_dir)).trial(trials[0].id).logs()
            if logs:
                if logs[-1] != current:
                    current, offset = logs[-1], 0
                with open(current, "rb") as f:
                    f.seek(offset)
                    data = f.read()
                offset += len(data)
                if data:
                    typer.echo(data.decode(errors="replace"), nl=False)
        if ExperimentState(exp.state).is_terminal:
            console.print(f"experiment {exp_id} {exp.state}")
            return
        time.sleep(0.5)


def _wait(exp_id: int, timeout: float | None) -> str:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        exp = experiments.get_experiment(ENV.store, exp_id)
        if ExperimentState(exp.state).is_terminal:
            return exp.state
        if deadline is not None and time.monotonic() > deadline:
            raise DethpcError(f"experiment {exp_id} still {exp.state} after {timeout:.0f}s")
        time.sleep(0.5)


experiment_app.command("create")(create)


@experiment_app.command("list")
def list_(json_out: bool = typer.Option(False, "--json"),
          all_: bool = typer.Option(True, "--all/--active")) -> None:
    """List experiments."""
    rows = views.list_experiments(ENV.store, include_ended=all_)
    if json_out:
        return print_json(rows)
    table("Experiments", ["id", "name", "state", "progress", "labels", "owner"],
          [[r["id"], r["name"], r["state"], f"{r['progress']:.0%}", ",".join(r["labels"]),
            r["owner"]] for r in rows])


@experiment_app.command("describe")
def describe(exp_id: int, json_out: bool = typer.Option(False, "--json")) -> None:
    """An experiment with every trial, its best validation metric and checkpoint."""
    d = views.describe_experiment(ENV.store, exp_id)
    if json_out:
        return print_json(d)
    metric = d["searcher"]["metric"]
    console.print(f"[bold]Experiment {d['id']}[/] {d['name']}: {d['state']} "
                  f"({d['progress']:.0%}), searcher {d['searcher']['name']}, metric {metric} "
                  f"({'smaller' if d['searcher']['smaller_is_better'] else 'larger'} is better)")
    if d["message"]:
        console.print(f"message: {d['message']}")
    table("Trials", ["trial", "state", "waiting for", "steps", f"best {metric}", "rung",
                     "searcher", "restarts", "best checkpoint", "hparams"],
          [[t["id"], t["state"], t["pending_reason"] or "", t["steps_completed"],
            fmt_metric(t["best_validation"]), t["rung"], t["searcher_status"], t["restarts"],
            t["best_checkpoint"], json.dumps(t["hparams"])] for t in d["trials"]])
    for b in d["rungs"]:
        table(f"ASHA bracket {b.get('bracket', 0)} ({b.get('created', '?')} trial(s) created)",
              ["rung", "length", "reports", "keep", f"cut-off {metric}"],
              [[i, r.get("length"), len(r.get("metrics", [])), r.get("keep"),
                fmt_metric(r.get("cutoff"))] for i, r in enumerate(b.get("rungs", []))])
    best = d["best_trial"]
    if best:
        console.print(f"[bold green]best trial {best['id']}[/]: {metric}="
                      f"{fmt_metric(best['best_validation'])} checkpoint "
                      f"{best['best_checkpoint']} hparams {json.dumps(best['hparams'])}")


@experiment_app.command("list-trials")
def list_trials(exp_id: int, json_out: bool = typer.Option(False, "--json")) -> None:
    """Trials of an experiment."""
    rows = views.describe_experiment(ENV.store, exp_id)["trials"]
    if json_out:
        return print_json(rows)
    table(f"Trials of experiment {exp_id}",
          ["trial", "state", "steps", "best", "latest checkpoint", "restarts", "exit"],
          [[t["id"], t["state"], t["steps_completed"], fmt_metric(t["best_validation"]),
            t["latest_checkpoint"], t["restarts"], t["exit_reason"]] for t in rows])


@experiment_app.command("list-checkpoints")
def list_checkpoints(exp_id: int, json_out: bool = typer.Option(False, "--json")) -> None:
    """Checkpoints of an experiment (deleted ones included, marked)."""
    rows = views.checkpoints_of(ENV.store, exp_id)
    if json_out:
        return print_json(rows)
    table(f"Checkpoints of experiment {exp_id}",
          ["uuid", "trial", "steps", "metric", "state", "path"],
          [[c["uuid"], c["trial_id"], c["steps_completed"], fmt_metric(c["validation_metric"]),
            c["state"], c["path"]] for c in rows])


@experiment_app.command("logs")
def logs(exp_id: int, json_out: bool = typer.Option(False, "--json")) -> None:
    """The experiment's event log (submissions, preemptions, restarts, stops)."""
    rows = views.events_of(ENV.store, exp_id)
    if json_out:
        return print_json(rows)
    for e in rows:
        stamp = time.strftime("%H:%M:%S", time.localtime(e["time"]))
        trial = f"trial {e['trial_id']} " if e["trial_id"] else ""
        console.print(f"{stamp} {trial}[bold]{e['kind']}[/] {e['message']}", highlight=False)


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
def preview_search(config_file: Path, config: list[str] = ConfigOpt) -> None:
    """The trials and rung lengths the searcher would create."""
    from dethpc.searchers.preview import preview_search as preview
    from dethpc.searchers.preview import render_preview

    cfg = load_experiment_config(config_file, config)
    typer.echo(render_preview(preview(cfg.searcher, cfg.hyperparameters, cfg.experiment_seed)))


@label_app.command("add")
def label_add(exp_id: int, label: str) -> None:
    console.print(experiments.set_labels(ENV.store, exp_id, [label], []))


@label_app.command("remove")
def label_remove(exp_id: int, label: str) -> None:
    console.print(experiments.set_labels(ENV.store, exp_id, [], [label]))
