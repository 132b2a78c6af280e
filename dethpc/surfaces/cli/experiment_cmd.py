"""``dethpc experiment ...`` (and ``dethpc submit``): thin wrappers over the library."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dethpc.common.errors import DethpcError
from dethpc.common.paths import ExperimentPaths
from dethpc.config import load_experiment_config
from dethpc.config.model import ExperimentConfig
from dethpc.control import experiments, service
from dethpc.store.access import ADMIN_ROLE, Scope
from dethpc.store.models import ExperimentState
from dethpc.surfaces import views
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
from dethpc.surfaces.cli.daemon_cmd import UntrackedLook, catch_up_if_untracked
from dethpc.surfaces.cli.shared import (
    TimeLimitOpt,
    WaitOpt,
    print_checkpoints,
    rehearse_targets,
    stream_trial_log,
)
from dethpc.surfaces.layout import (
    Col,
    fit,
    flat_hparams,
    fmt_value,
    kv_text,
    one_line,
    terminal_width,
)

if TYPE_CHECKING:
    from dethpc.searchers.base import Create
    from dethpc.surfaces.cli.progress import Reporter

#: what each experiment kind means, for ``describe``
KIND_WORDS = {
    "managed": "dethpc submit: the daemon submits its trials",
    "script": "dethpc sbatch --search: the daemon submits the wrapped script",
    "sbatch": "dethpc sbatch: submitted once by the CLI, tracked by the daemon",
    "detached": "a job dethpc did not submit that registered itself; tracked only",
}

experiment_app = typer.Typer(help="Create, watch and control experiments.", no_args_is_help=True)
label_app = typer.Typer(help="Add or remove experiment labels.", no_args_is_help=True)
experiment_app.add_typer(label_app, name="label")

ConfigOpt = typer.Option([], "--config", "-c", help="Override a config field: key.sub=value")


def create(
    config_file: Path = typer.Argument(..., help="experiment config (YAML)"),
    context: Path = typer.Argument(..., help="model directory to snapshot"),
    config: list[str] = ConfigOpt,
    no_daemon: bool = typer.Option(False, "--no-daemon", help="do not start the daemon"),
    follow: bool = typer.Option(False, "--follow", "--follow-first-trial", "-f",
                                help="stream the first trial's log"),
    paused: bool = typer.Option(False, "--paused", help="record it paused: nothing runs "
                                "until `dethpc e activate ID`"),
    wait: bool = typer.Option(False, "--wait", help="wait until the experiment ends"),
    local: bool = typer.Option(False, "--local", help="run the first trial in this shell, "
                               "without the daemon or the cluster"),
    test: bool = typer.Option(False, "--test", "--test-mode", "-t", help="one batch, one "
                              "validation, one checkpoint (with --local: in this shell; "
                              "alone: on the cluster)"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Validate the config, snapshot the model directory and record the experiment.

    The model-debugging ladder: ``--local --test`` (this shell, one batch), then
    ``--test`` (a one-batch experiment on the cluster, followed to its end), then a
    full run (``--follow`` streams the first trial's log)."""
    cfg = load_experiment_config(config_file, config)
    for w in cfg.warnings:
        err_console.print(f"[yellow]warning:[/] {w}")
    if local:
        if no_daemon or wait or follow or paused:
            raise typer.BadParameter("--local runs in this shell: --no-daemon, --wait, "
                                     "--follow and --paused do not apply", param_hint="--local")
        raise typer.Exit(_run_local(cfg, context, test=test))
    if paused and (test or follow or wait):
        raise typer.BadParameter("a paused experiment does not run until `dethpc e activate "
                                 "ID`: drop --paused, or --test/--follow/--wait",
                                 param_hint="--paused")
    if test:
        cfg = _test_config(cfg, config_file)
    exp_id = experiments.create_experiment(ENV.store, ENV.cluster, cfg, context, ENV.backend)
    if paused:
        experiments.request_state(ENV.store, exp_id, "pause")
    if json_out:
        print_json({"id": exp_id})
    else:
        note = f"; paused: `dethpc e activate {exp_id}` starts it" if paused else ""
        console.print(f"Created {'test ' if test else ''}experiment {exp_id} ({cfg.name}){note}",
                      highlight=False)
    if not no_daemon:
        pid = service.start()
        if not json_out:
            console.print(f"daemon running (pid {pid}); log: {service.log_path()}")
    if test:
        # Determined's --test follows the test experiment and says whether it passed
        state = _follow(exp_id) if not json_out else _wait(exp_id, None, show=False)
        passed = state == ExperimentState.COMPLETED.value
        err_console.print(f"test experiment {exp_id} {'passed' if passed else 'failed'} "
                          f"({state})", highlight=False)
        raise typer.Exit(0 if passed else 1)
    if follow:
        _follow(exp_id)
    elif wait:
        _wait(exp_id, None, show=not json_out)


def _first_trial(cfg: ExperimentConfig) -> Create:
    from dethpc.searchers.base import Create
    from dethpc.searchers.factory import make_searcher

    return next(a for a in make_searcher(cfg.searcher, cfg.hyperparameters,
                                         cfg.experiment_seed).initial()
                if isinstance(a, Create))


def _run_local(cfg: ExperimentConfig, context: Path, *, test: bool) -> int:
    """``--local [--test]``: the first trial's entrypoint in this shell, no daemon."""
    from dethpc.pytorch import run_test_mode

    first = _first_trial(cfg)
    if test:
        code = run_test_mode(cfg.entrypoint, context, first.hparams, experiment_config=cfg.raw)
        console.print(f"test mode {'passed' if code == 0 else f'failed (exit code {code})'}")
        return code
    import tempfile

    workdir = Path(tempfile.mkdtemp(prefix="dethpc-local-"))
    length = cfg.searcher.max_length
    target = None if length is None else {
        "unit": length.unit.value, "length": first.length,
        "validate_at": sorted(set(first.validate_at) | {first.length})}
    code = run_test_mode(cfg.entrypoint, context, first.hparams, experiment_config=cfg.raw,
                         workdir=workdir, test_mode=False, target=target)
    console.print(f"local run {'completed' if code == 0 else f'failed (exit code {code})'}; "
                  f"trial directory {workdir / 'trials' / '0'}", highlight=False)
    return code


def _test_config(cfg: ExperimentConfig, source: Path) -> ExperimentConfig:
    """The one-batch test experiment of ``cfg`` (dethpc.config.testrun)."""
    from dethpc.config import parse_experiment_config
    from dethpc.config.testrun import make_test_config

    return parse_experiment_config(make_test_config(cfg.raw, _first_trial(cfg).hparams),
                                   f"{source} (test mode)")


def _follow(exp_id: int) -> str:
    """Stream the first trial's log until the experiment ends; its final state. Progress
    on stderr meanwhile (``dethpc.surfaces.cli.progress``): a bar, the log printing above it,
    when stdout and stderr are both terminals, else plain lines on stderr."""
    import sys

    from dethpc.surfaces.cli import progress

    with progress.Reporter(tty=sys.stdout.isatty() and sys.stderr.isatty(),
                           redirect_stdout=True) as shown:
        state = _follow_log(exp_id, shown)
    console.print(f"experiment {exp_id} {state}")  # after the display ended: below it
    return state


def _follow_log(exp_id: int, shown: Reporter) -> str:
    import sys

    from dethpc.surfaces.cli import progress

    offset, current, done_reading = 0, None, False
    while True:
        shown.update(progress.read(ENV.store, exp_id))
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
                    sys.stdout.write(data.decode(errors="replace"))
                    sys.stdout.flush()
        if ExperimentState(exp.state).is_terminal and done_reading:
            return str(exp.state)
        done_reading = ExperimentState(exp.state).is_terminal  # one more read, then stop
        if not done_reading:
            time.sleep(0.5)


def _wait(exp_id: int, timeout: float | None, *, show: bool = True) -> str:
    """Wait until the experiment ends; its final state. ``show``: progress on stderr
    (``dethpc.surfaces.cli.progress``: a bar on a terminal, else one plain line per change)."""
    from dethpc.surfaces.cli import progress

    deadline = None if timeout is None else time.monotonic() + timeout
    # no daemon running: the jobs' ends are read from Slurm every few seconds (said once,
    # on stderr), so a wait on a `dethpc sbatch --no-daemon` job still ends
    untracked = UntrackedLook(lambda: [progress.read(ENV.store, exp_id).state])
    with progress.Reporter(tty=None if show else False) as shown:
        while True:
            untracked.look()
            snap = progress.read(ENV.store, exp_id)
            if show:
                shown.update(snap)
            if ExperimentState(snap.state).is_terminal:
                return snap.state
            if deadline is not None and time.monotonic() > deadline:
                raise DethpcError(f"experiment {exp_id} still {snap.state} after "
                                  f"{timeout:.0f}s")
            time.sleep(0.5)


experiment_app.command("create")(create)


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
    if json_out:
        return print_json(rows)
    table("Experiments", [Col("id", keep=100), Col("name", shrink=True, keep=90),
                          Col("kind", keep=40), Col("state", keep=95),
                          Col("progress", keep=80), Col("labels", shrink=True, keep=30),
                          Col("owner", shrink=True, keep=60)],
          [[r["id"], r["name"], r["kind"], r["state"], f"{r['progress']:.0%}",
            ",".join(r["labels"]), r["owner"]] for r in rows], wide=wide)


@experiment_app.command("describe")
def describe(exp_id: int, json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """An experiment with every trial, its best validation metric and checkpoint."""
    caught = catch_up_if_untracked()
    d = views.describe_experiment(ENV.store, exp_id)
    say_if_untracked([d["state"]], read_now=caught is not None)
    if json_out:
        return print_json(d)
    metric = d["searcher"]["metric"]
    say(f"Experiment {d['id']} {d['name']}: {d['state']} ({d['progress']:.0%}), searcher "
        f"{d['searcher']['name']}, metric {metric} "
        f"({'smaller' if d['searcher']['smaller_is_better'] else 'larger'} is better)",
        wide=wide)
    say(f"kind: {d['kind']} ({KIND_WORDS.get(d['kind'], d['kind'])})", wide=wide)
    if d["message"]:
        say(f"message: {d['message']}", wide=wide)
    base = [Col("trial", keep=100), Col("state", keep=90),
            Col("waiting for", shrink=True, min_width=10, keep=45), Col("steps", keep=70),
            Col(f"best {metric}", keep=80), Col("rung", keep=30), Col("searcher", keep=35),
            Col("restarts", keep=20), Col("best checkpoint", shrink=True, keep=60)]
    cells = [[t["id"], t["state"], t["pending_reason"] or "", t["steps_completed"],
              fmt_metric(t["best_validation"]), t["rung"], t["searcher_status"],
              t["restarts"], t["best_checkpoint"]] for t in d["trials"]]
    cols, rows = hparam_columns(base, cells, [t["hparams"] for t in d["trials"]], wide=wide)
    table("Trials", cols, rows, wide=wide)
    for t in d["trials"]:
        if t.get("hold"):
            say(f"trial {t['id']}: {t['hold']}", wide=wide, hang=2)
        if t.get("straggler"):
            say(f"trial {t['id']}: slowest {straggler_text(t['straggler'])}", wide=wide,
                hang=2)
    for n in d.get("excluded_nodes", []):
        runs = ", ".join(f"trial {r['trial_id']} job {r['job']}" for r in n["evidence"])
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(n["last_at"]))
        say(f"node {n['node']} excluded from later jobs: {n['failures']} failed runs in a "
            f"row, the last at {last} ({runs})", wide=wide, hang=2)
    for b in d["rungs"]:
        table(f"ASHA bracket {b.get('bracket', 0)} ({b.get('created', '?')} trial(s) created)",
              ["rung", "length", "reports", "keep", f"cut-off {metric}"],
              [[i, r.get("length"), len(r.get("metrics", [])), r.get("keep"),
                fmt_metric(r.get("cutoff"))] for i, r in enumerate(b.get("rungs", []))],
              wide=wide)
    best = d["best_trial"]
    if best:
        ckpt = best["best_checkpoint"]
        say(f"best trial {best['id']}: {metric}={fmt_metric(best['best_validation'])}"
            + (f" checkpoint {ckpt}" if ckpt else ""), wide=wide, hang=2)
        say(f"  hparams: {kv_text(best['hparams'])}", wide=wide, hang=4)


def straggler_text(s: dict[str, object]) -> str:
    """``describe``'s words for a trial's straggler (``views.straggler_of``)."""
    from dethpc.control.stragglers import Straggler

    return Straggler(**s).describe()  # type: ignore[arg-type]


def hparam_columns(base: list[Col], cells: list[list[object]], hparams: list[dict[str, object]],
                   *, wide: bool) -> tuple[list[Col], list[list[object]]]:
    """The trial table's columns with the hyperparameters in their own columns (one per
    flattened name) when those fit the terminal with no column left out (always with
    ``wide``), else in one ``hparams`` column of ``k=v`` pairs, cut with ``…``."""
    flat = [flat_hparams(h) for h in hparams]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    own_cols = base + [Col(k, keep=40) for k in keys]
    own_cells: list[list[object]] = [c + [fmt_value(f[k]) if k in f else "" for k in keys]
                                     for c, f in zip(cells, flat, strict=True)]
    if wide or not fit(own_cols, [[one_line(v) for v in c] for c in own_cells],
                       terminal_width()).dropped:
        return own_cols, own_cells
    return (base + [Col("hparams", shrink=True, min_width=12, keep=50)],
            [c + [kv_text(h)] for c, h in zip(cells, hparams, strict=True)])


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
