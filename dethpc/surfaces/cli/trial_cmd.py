"""``dethpc trial ...``, ``dethpc checkpoint ...`` and ``dethpc render``."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from dethpc.common.errors import DethpcError
from dethpc.common.paths import ExperimentPaths
from dethpc.config import load_experiment_config
from dethpc.store.models import CheckpointState
from dethpc.surfaces import views
from dethpc.surfaces.cli.common import (
    ENV,
    JsonOpt,
    WideOpt,
    console,
    fmt_metric,
    print_json,
    say,
    table,
)
from dethpc.surfaces.cli.shared import (
    TimeLimitOpt,
    WaitOpt,
    print_checkpoints,
    rehearse_targets,
    stream_trial_log,
)
from dethpc.surfaces.layout import Col, kv_text

trial_app = typer.Typer(help="Inspect trials.", no_args_is_help=True)
checkpoint_app = typer.Typer(help="Inspect checkpoints.", no_args_is_help=True)


def steps_text(steps: int, target: int) -> str:
    """A trial's steps against its searcher's length: ``6/8``. Past it (single, random,
    grid: the trial's own ``fit(max_length=...)`` decides its length, as Determined's,
    and ``searcher.max_length`` is only the length of a ``fit`` without one) the steps
    with that length named, never a fraction above 1; without a length, the steps."""
    if target <= 0:
        return str(steps)
    if steps > target:
        return f"{steps} (past searcher.max_length {target}: fit(max_length) decides)"
    return f"{steps}/{target}"


@trial_app.command("describe")
def describe(trial_id: int, json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """A trial: state, hparams, validations, checkpoints, jobs, events."""
    d = views.trial_detail(ENV.store, trial_id)
    if json_out:
        return print_json(d)
    say(f"Trial {d['id']} of experiment {d['experiment_id']}: {d['state']} steps "
        f"{steps_text(d['steps_completed'], d['target_length'])} "
        f"best {fmt_metric(d['best_validation'])} "
        f"restarts {d['restarts']} exit {d['exit_reason']!r}", wide=wide)
    say(f"hparams: {kv_text(d['hparams'])}", wide=wide, hang=2)
    if d["early_exit"]:
        say(f"early exit: {d['early_exit']} (reported by the training code)", wide=wide)
    if d["metadata"]:
        say(f"metadata: {kv_text(d['metadata'])}", wide=wide, hang=2)
    table("Validations", [Col("steps", keep=100), Col("metrics", shrink=True, keep=90)],
          [[v["steps"], kv_text(v["metrics"])] for v in d["validations"]], wide=wide)
    table("Checkpoints", [Col("uuid", shrink=True, min_width=36, keep=100),
                          Col("steps", keep=90), Col("metric", keep=80),
                          Col("state", keep=85)],
          [[c["uuid"], c["steps_completed"], fmt_metric(c["validation_metric"]), c["state"]]
           for c in d["checkpoints"]], wide=wide)
    table("Jobs", [Col("ref", shrink=True, min_width=10, keep=100), Col("state", keep=90),
                   Col("restarts", keep=60), Col("exit", shrink=True, keep=70),
                   Col("nodes", shrink=True, keep=50)],
          [[j["ref"], j["state"], j["restart_count"], j["exit_reason"], j["nodes"]]
           for j in d["jobs"]], wide=wide)


@trial_app.command("logs")
def logs(trial_id: int, follow: bool = typer.Option(False, "--follow", "-f"),
         tail: int = typer.Option(0, help="only the last N lines")) -> None:
    """The trial's job output (all runs, requeues appended)."""
    views.trial_detail(ENV.store, trial_id)  # a clear error for an unknown trial
    stream_trial_log(trial_id, follow=follow, tail=tail)


@trial_app.command("preempt")
def preempt(trial_id: int, time_limit: bool = TimeLimitOpt, wait: bool = WaitOpt) -> None:
    """Rehearse a preemption of a running trial: what Slurm sends on a real one (the
    pool's early signal to the job's shell, then the requeue). Not a restart."""
    from dethpc.control.rehearse import find_target

    rehearse_targets([find_target(ENV.store, ENV.cluster, trial_id)], time_limit, wait)


@checkpoint_app.command("describe")
def checkpoint_describe(uuid: str, json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """A checkpoint's trial, steps, metric, path and metadata."""
    d = views.checkpoint_detail(ENV.store, uuid)
    if json_out:
        return print_json(d)
    for k, v in d.items():
        say(f"{k}: {kv_text(v) if isinstance(v, dict) else v}", wide=wide, hang=2)


def render(config_file: Path = typer.Argument(..., help="experiment config (YAML)"),
           context: Path = typer.Argument(..., help="model directory"),
           config: list[str] = typer.Option([], "--config", "-c"),
           backend: str = typer.Option(None, help="local or slurm (default: the cluster's)"),
           ) -> None:
    """Print exactly the job scripts that would be submitted for the first trial."""
    from dethpc.common.traits import BackendKind
    from dethpc.jobs.jobscript import array_script, trial_script

    cfg = load_experiment_config(config_file, config)
    if not Path(context).is_dir():
        raise typer.BadParameter(f"{context} is not a directory")
    cluster = ENV.cluster
    name = backend or cluster.backend
    if BackendKind.parse(name) is None:
        raise typer.BadParameter(f"unknown backend {name!r}; allowed: "
                                 f"{', '.join(k.value for k in BackendKind)}")
    run_dir = Path(cluster.runs_root).expanduser() / "<experiment-id>"
    python = cluster.python or sys.executable
    script = trial_script(cfg, cluster, backend=name, python=python, run_dir=run_dir,
                          exp_id=0, trial_id=1)
    typer.echo(f"# ---- trials/1/job.sbatch ({name} backend) ----")
    typer.echo(script, nl=False)
    typer.echo("# ---- arrays/batch-1.sbatch (what sbatch --array receives) ----")
    typer.echo(array_script(cfg, cluster, run_dir=run_dir, exp_id=0, batch_id=1,
                            tasks=[(0, ExperimentPaths(run_dir).trial(1).job_script)]), nl=False)


@checkpoint_app.command("list")
def checkpoint_list(exp_id: int, json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """Checkpoints of an experiment (Determined's ``det checkpoint list EXPERIMENT_ID``)."""
    print_checkpoints(exp_id, json_out=json_out, wide=wide)


@checkpoint_app.command("download")
def checkpoint_download(uuid: str, output_dir: Path = typer.Option(
        None, "--output-dir", "-o", help="where to copy it (default: checkpoints/<uuid>)"),
        ) -> None:
    """Copy a checkpoint's files to a directory (``det checkpoint download``)."""
    import shutil

    d = views.checkpoint_detail(ENV.store, uuid)
    src = Path(d["path"])
    if d["state"] != CheckpointState.COMPLETED:
        raise DethpcError(f"checkpoint {uuid} is {d['state']}: deleted by garbage "
                          "collection or by the training code (checkpoint.delete); "
                          "`dethpc checkpoint list` shows those left")
    if not src.is_dir():
        raise DethpcError(f"checkpoint {uuid} ({d['state']}) has no files at {src}; "
                          "garbage collection may have deleted it")
    dest = output_dir if output_dir is not None else Path("checkpoints") / uuid
    if dest.exists() and any(dest.iterdir()):
        raise DethpcError(f"{dest} exists and is not empty; pick another --output-dir")
    shutil.copytree(src, dest, dirs_exist_ok=True)
    console.print(f"checkpoint {uuid} copied to {dest}", highlight=False)
