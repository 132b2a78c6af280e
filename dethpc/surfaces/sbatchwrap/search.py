"""Search over an unchanged script: ``dethpc sbatch --search search.yaml script.sh``.

Owns: the search file (``parse_search_config``: the Determined experiment-config
fields that mean something for a script, validated by dethpc's own config machinery
over a synthetic entrypoint naming the script), the sbatch options a search cannot
honour (``refuse_options``), what a SCRIPT experiment keeps beside its config
(``SearchSubmission`` in ``<run dir>/context/``: the user's options, the submit
directory and a copy of the script), and the SCRIPT kind's job scripts
(``ScriptJobs``: one wrapper per trial, one array per batch carrying the user's
directives). See docs/existing-scripts.md, "Search over an unchanged script".
Must not: submit (the daemon does, through ``dethpc.jobs.kinds``), touch the store, or
change what ``dethpc submit`` accepts.

Why a synthetic entrypoint: every rule of the experiment config (Determined's
verdict, the searcher specs, hyperparameters, ``check_supported``) applies to a
search exactly as to ``dethpc submit``; the script is the entrypoint, so the search
file may not name one and the parser sees ``[<script name>, *args]``.
"""

from __future__ import annotations

import copy
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dethpc.backends.base import Backend
from dethpc.common.errors import ConfigError, DethpcError, FieldError
from dethpc.common.jobenv import ENV_HP_PREFIX
from dethpc.common.kinds import ExperimentKind
from dethpc.common.paths import ExperimentPaths
from dethpc.common.sbatch_options import canonical_option
from dethpc.config._check import Checker, allowed_list, did_you_mean, join, show
from dethpc.config._yaml import load_yaml_file
from dethpc.config.experiment import _IGNORED_TOP, parse_experiment_config
from dethpc.config.hparams import flatten_hparams
from dethpc.config.model import AshaVariant, ClusterConfig, ExperimentConfig
from dethpc.config.overrides import apply_overrides
from dethpc.jobs.script_jobs import ScriptJobs, SearchSubmission, hparam_var
from dethpc.store import Store
from dethpc.surfaces.sbatchwrap.shim import write_shim

#: top-level fields of a search file (Determined's names)
SEARCH_FIELDS = ("name", "description", "labels", "searcher", "hyperparameters",
                 "max_restarts", "resources", "checkpoint_storage", "reproducibility",
                 "slurm")
#: ``slurm``: only the hang watchdog (opted in with ``output: true``); the script's own
#: #SBATCH lines and the sbatch options shape the job
SLURM_FIELDS = ("watchdog",)
#: ``resources``: only the pool; the script's own #SBATCH lines shape the job
RESOURCES_FIELDS = ("resource_pool",)
#: ``checkpoint_storage``: only the GC counts; the script writes its checkpoints
#: where it likes and registers them with ``dethpc report checkpoint``
CHECKPOINT_FIELDS = ("save_experiment_best", "save_trial_best", "save_trial_latest")

#: experiment-config fields that a search file may not set, and why
_NOT_FOR_SCRIPTS = {
    "entrypoint": "the script is the entrypoint: give it after the sbatch options "
                  "(dethpc sbatch --search search.yaml script.sh [args...])",
    "environment": "the script runs in the environment it is submitted from, as with "
                   "sbatch; set variables in the script or with --export",
    "bind_mounts": "containers are the script's own business (e.g. apptainer exec in it)",
    "min_validation_period": "the script decides when it validates "
                             "(dethpc report metrics --validation)",
    "min_checkpoint_period": "the script decides when it checkpoints "
                             "(dethpc report checkpoint)",
    "records_per_epoch": "lengths are counted in the script's own steps",
    "data": "the script reads its own data; pass values as hyperparameters",
}
_RESOURCES_WHY = ("the script's #SBATCH lines and the sbatch options shape the job "
                  "(--nodes, --gres, --cpus-per-task...); only resources.resource_pool "
                  "is read here")
_SLURM_WHY = ("give sbatch options on the command line or as #SBATCH lines in the script; "
              "only slurm.watchdog (the hang watchdog, with output: true) is read here")
_CHECKPOINT_WHY = ("the script writes its checkpoints where it likes and registers them "
                   "with `dethpc report checkpoint PATH`; only the GC counts are read here")

#: sections a search file reads only in part: what it reads, and why not the rest
_PARTLY_READ = {"resources": (RESOURCES_FIELDS, _RESOURCES_WHY),
                "slurm": (SLURM_FIELDS, _SLURM_WHY),
                "checkpoint_storage": (CHECKPOINT_FIELDS, _CHECKPOINT_WHY)}

#: sbatch options a search cannot honour (canonical long name -> why)
REFUSED_OPTIONS = {
    "--wrap": "a search runs a script file; put the command in a script",
    "--array": "the search makes its own array (one task per trial); remove --array "
               "(and #SBATCH --array) and let searcher.max_trials say how many",
    "--dependency": "the daemon submits the search's trials over time, so a dependency "
                    "on another job cannot hold them all; run `dethpc sbatch --search` "
                    "once that job has ended (e.g. at the end of it)",
    "--wait": "the search's trials are submitted by the daemon later; follow it with "
              "`dethpc experiment wait ID` or `dethpc experiment describe ID`",
    "--test-only": "nothing would be recorded; `dethpc sbatch --search` already asks "
                   "Slurm (sbatch --test-only) before it records the experiment",
    "--hold": "the daemon submits the trials; pause the experiment instead "
              "(dethpc experiment pause ID)",
}


# ------------------------------------------------------------------ search file
def entrypoint_of(script: Path, args: Sequence[str]) -> list[str]:
    """The synthetic entrypoint a SCRIPT experiment's config records."""
    return [script.name, *args]


def parse_search_config(raw: Any, script: Path, args: Sequence[str] = (),
                        source: str = "search file") -> ExperimentConfig:
    """Validate a search file for ``script``: the fields above (every problem with its
    field path, what was found and what is allowed, in one ``ConfigError``), then
    the whole experiment-config machinery over ``raw`` plus the synthetic entrypoint,
    then the rules of scripts (no ASHA promotion variant)."""
    ck = Checker()
    if not isinstance(raw, dict):
        what = "the file is empty" if raw is None else f"got {show(raw)}"
        raise ConfigError([FieldError("", f"expected a mapping with at least searcher "
                                          f"(and hyperparameters); {what}")], source)
    _check_fields(ck, raw)
    ck.raise_if_errors(source)
    full = copy.deepcopy(raw)
    full["entrypoint"] = entrypoint_of(script, args)
    cfg = parse_experiment_config(full, source)
    _check_script_rules(ck, cfg)
    ck.raise_if_errors(source)
    return cfg


def load_search_config(path: str | Path, script: Path, args: Sequence[str] = (),
                       overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read a search file, apply ``--config key=value`` overrides, validate."""
    source = str(path)
    raw = load_yaml_file(path)
    if overrides and isinstance(raw, dict):
        raw = apply_overrides(raw, overrides)
    return parse_search_config(raw, script, args, source)


def _check_fields(ck: Checker, raw: Mapping[str, Any]) -> None:
    for key, value in raw.items():
        path = str(key)
        if key in _NOT_FOR_SCRIPTS:
            ck.error(path, f"not read by a search over a script: {_NOT_FOR_SCRIPTS[key]}")
        elif key in _PARTLY_READ and isinstance(value, dict):
            allowed, why = _PARTLY_READ[key]
            _only(ck, value, path, allowed, why)
        elif key not in SEARCH_FIELDS and key not in _IGNORED_TOP:  # those: a warning
            hint = did_you_mean(path, SEARCH_FIELDS)
            ck.error(path, f"unknown field {show(key)} for a search over a script; {hint}"
                           f"allowed: {allowed_list(SEARCH_FIELDS)}")


def _only(ck: Checker, data: Mapping[str, Any], path: str, allowed: Sequence[str],
          why: str) -> None:
    for key in data:
        if key not in allowed:
            ck.error(join(path, str(key)), f"not read by a search over a script: {why}; "
                                           f"allowed: {allowed_list(allowed)}")


def _check_script_rules(ck: Checker, cfg: ExperimentConfig) -> None:
    if cfg.searcher.name == "adaptive_asha" and cfg.searcher.variant == AshaVariant.PROMOTION:
        ck.error("searcher.variant",
                 "'promotion' is not allowed over a script: it pauses trials at a rung "
                 "and resumes the winners to a longer length, which a script that runs "
                 "to searcher.max_length cannot honour; allowed: 'stopping' (the default: "
                 "losers are told through `dethpc should-stop`)")
    names: dict[str, str] = {}
    for name in flatten_hparams(cfg.hyperparameters):
        var = hparam_var(name)
        if var in names:
            ck.error(join("hyperparameters", name),
                     f"its variable {var} is also that of {names[var]!r}; rename one "
                     f"({ENV_HP_PREFIX}<NAME>: upper case, '.' and other characters -> '_')")
        names[var] = name


# ------------------------------------------------------------------ sbatch options
def refuse_options(options: Sequence[tuple[str, str]]) -> None:
    """Refuse the sbatch options a search cannot honour, before anything is recorded.
    ``options`` are (canonical long option, where it came from: "command line",
    "script line 3", "SBATCH_ARRAY"...)."""
    problems = [f"{opt} ({where}) cannot be used with --search: {REFUSED_OPTIONS[opt]}"
                for opt, where in options if opt in REFUSED_OPTIONS]
    if problems:
        raise SearchOptionError("\n".join(problems))


class SearchOptionError(DethpcError):
    """An sbatch option that a search over a script cannot honour."""

    exit_code = 2


# ------------------------------------------------------------------ submission
def submit_search(store: Store, cluster: ClusterConfig, backend: Backend, *,
                  search_file: Path, script: Path, args: Sequence[str],
                  options: Sequence[tuple[str, str]], submit_dir: Path,
                  environ: Mapping[str, str], overrides: Sequence[str] = ()) -> int:
    """Record a search over ``script`` as an experiment of kind SCRIPT; returns its id.

    ``options``: the user's sbatch options as (``#SBATCH`` argument, where it came
    from), in sbatch's order of precedence (script lines, SBATCH_* variables, command
    line). Refused options and an invalid search file raise before anything is
    recorded; then ``create_experiment`` asks Slurm (``sbatch --test-only`` of the
    first batch's array script) and records the experiment with the script's copy,
    the options, the submit directory and ``environ`` in its run directory. The
    daemon submits the trials."""
    from dethpc.control.experiments import create_experiment
    from dethpc.launch import submitenv

    refuse_options([(canonical_option(d) or d, where) for d, where in options])
    cfg = load_search_config(search_file, script, args, overrides)
    sub = SearchSubmission(script_name=script.name, script_path=str(script.resolve()),
                           args=tuple(args), submit_dir=str(Path(submit_dir).resolve()),
                           directives=tuple(d for d, _ in options))
    with tempfile.TemporaryDirectory(prefix="dethpc-search-") as tmp:
        staged = ExperimentPaths(Path(tmp))
        staged.context.mkdir()
        try:
            shutil.copy2(script, staged.script)
            staged.script.chmod(staged.script.stat().st_mode | 0o100)  # run as slurmd would
        except OSError as exc:
            raise DethpcError(f"cannot read the script {script}: {exc}") from None
        staged.submission.write_text(sub.to_json(), encoding="utf-8")
        submitenv.save(staged.submit_env, environ)
        exp_id = create_experiment(store, cluster, cfg, staged.context, backend,
                                   kind=ExperimentKind.SCRIPT, jobs=ScriptJobs(sub, staged))
    from dethpc.control.experiments import get_experiment

    write_shim(ExperimentPaths(Path(get_experiment(store, exp_id).run_dir)),
               cluster.python or sys.executable)
    return exp_id


def announce(exp_id: int, parsable: bool) -> str:
    """What ``dethpc sbatch --search`` prints: ``Submitted experiment N`` (sbatch's
    sentence, naming what was recorded: the trials' jobs come later, from the
    daemon), or ``N`` alone under ``--parsable``."""
    return str(exp_id) if parsable else f"Submitted experiment {exp_id}"
