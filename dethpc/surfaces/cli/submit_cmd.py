"""``dethpc submit`` (``dethpc experiment create``): validate, snapshot, record.

Owns: the submit command and its model-debugging ladder (``--local``, ``--test``).
Its own module, importing only what submission needs (issue 47 item 1: "experiment N
submitted" in <= 0.5 s): the config models, the experiment's checks and its rows, which
an SQLite store at head gets from ``sqlite3`` alone (``Env.store_for_new_experiment``).
SQLAlchemy, the searchers and the progress display are loaded only by the options that
use them (``--paused``, ``--test``, ``--follow``, ``--wait``, ``--local``).
Must not: hold logic that the library lacks.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dethpc.config import load_experiment_config
from dethpc.control import experiments, service
from dethpc.surfaces.cli.common import ENV, console, err_console, print_json

if TYPE_CHECKING:
    from dethpc.config.model import ExperimentConfig
    from dethpc.searchers.base import Create
    from dethpc.store import Store
    from dethpc.store.new_experiment import SqliteAtHead

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
    # --paused writes with the models next: the Store at once (else sqlite3 where it can)
    store = ENV.store if paused else store_for_new_experiment()
    exp_id = experiments.create_experiment(store, ENV.cluster, cfg, context, ENV.backend)
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
    if test or follow or wait:
        from dethpc.store.models import ExperimentState
        from dethpc.surfaces.cli.follow import _follow, _wait
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


def store_for_new_experiment() -> Store | SqliteAtHead:
    """Where a new experiment is recorded: an existing SQLite file at this dethpc's schema
    revision is written with ``sqlite3`` alone (``dethpc.store.new_experiment``: no
    SQLAlchemy, ~0.45 s less, issue 47), anything else through ``ENV.store`` (which
    creates, upgrades, checks the role). The same network-filesystem warning either way
    (``ENV.store`` says it too; an SQLite file has no role to check)."""
    from dethpc.common.paths import dethpc_home
    from dethpc.store.credentials import database_url
    from dethpc.store.location import check_store, default_url
    from dethpc.store.new_experiment import SqliteAtHead

    url = database_url(ENV.cluster) or default_url()
    quick = SqliteAtHead.open(url)
    if quick is None:
        return ENV.store
    check_store(url, dethpc_home(),
                say=lambda text: err_console.print(text, markup=False, highlight=False))
    return quick


def _first_trial(cfg: ExperimentConfig) -> Create:
    from dethpc.searchers.base import Create
    from dethpc.searchers.factory import make_searcher

    return next(a for a in make_searcher(cfg.searcher, cfg.hyperparameters,
                                         cfg.experiment_seed).initial()
                if isinstance(a, Create))


def _run_local(cfg: ExperimentConfig, context: Path, *, test: bool) -> int:
    """``--local [--test]``: the first trial's entrypoint in this shell, no daemon."""
    from dethpc.pytorch import run_test_mode
    from dethpc.searchers.base import target_document

    first = _first_trial(cfg)
    if test:
        code = run_test_mode(cfg.entrypoint, context, first.hparams, experiment_config=cfg.raw)
        console.print(f"test mode {'passed' if code == 0 else f'failed (exit code {code})'}")
        return code
    import tempfile

    workdir = Path(tempfile.mkdtemp(prefix="dethpc-local-"))
    length = cfg.searcher.max_length
    target = None if length is None else target_document(
        cfg.searcher, first.length, sorted(set(first.validate_at) | {first.length}))
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


