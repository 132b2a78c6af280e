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
import json
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from dethpc.backends.base import Backend
from dethpc.common.errors import ConfigError, DethpcError, FieldError
from dethpc.common.paths import ExperimentPaths
from dethpc.common.traits import BackendKind
from dethpc.config._check import Checker, allowed_list, did_you_mean, join, show
from dethpc.config._yaml import load_yaml_file
from dethpc.config.experiment import _IGNORED_TOP, parse_experiment_config
from dethpc.config.hparams import flatten_hparams
from dethpc.config.model import AshaVariant, ClusterConfig, ExperimentConfig, ResourcePool
from dethpc.config.overrides import apply_overrides
from dethpc.core.jobapi import hparam_env
from dethpc.jobs.directives import canonical_option, option_value
from dethpc.jobs.kinds import TrialJob
from dethpc.jobs.render import make_env, shquote
from dethpc.store import Store
from dethpc.store.models import ExperimentKind

ARRAY_TEMPLATE = "search_array.sbatch.j2"
TRIAL_TEMPLATE = "search_trial.sbatch.j2"

#: top-level fields of a search file (Determined's names)
SEARCH_FIELDS = ("name", "description", "labels", "searcher", "hyperparameters",
                 "max_restarts", "resources", "checkpoint_storage", "reproducibility")
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
    "slurm": "give sbatch options on the command line or as #SBATCH lines in the script",
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
_CHECKPOINT_WHY = ("the script writes its checkpoints where it likes and registers them "
                   "with `dethpc report checkpoint PATH`; only the GC counts are read here")

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
        elif key == "resources" and isinstance(value, dict):
            _only(ck, value, "resources", RESOURCES_FIELDS, _RESOURCES_WHY)
        elif key == "checkpoint_storage" and isinstance(value, dict):
            _only(ck, value, "checkpoint_storage", CHECKPOINT_FIELDS, _CHECKPOINT_WHY)
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
                     "(DETHPC_HP_<NAME>: upper case, '.' and other characters -> '_')")
        names[var] = name


def hparam_var(name: str) -> str:
    """``DETHPC_HP_<NAME>`` of a (dotted) hyperparameter name: the job API's rule."""
    nested: dict[str, Any] = {}
    *groups, leaf = name.split(".")
    inner = nested
    for group in groups:
        inner = inner.setdefault(group, {})
    inner[leaf] = 0
    (var,) = hparam_exports(nested).keys()
    return var


def hparam_exports(hparams: Mapping[str, Any]) -> dict[str, str]:
    """The ``DETHPC_HP_<NAME>`` variables of a trial's hyperparameters: the job API's
    ``dethpc.core.jobapi.hparam_env``, the one rule shared with ``dethpc hparams --env``
    (nested groups joined with ``_``, upper case, any character outside
    ``[A-Za-z0-9_]`` as ``_``; strings as they are, other values as JSON)."""
    return dict(hparam_env(dict(hparams)))


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


# ------------------------------------------------------------------ what is kept
@dataclass(frozen=True)
class SearchSubmission:
    """What ``dethpc sbatch --search`` keeps beside the experiment's config
    (``ExperimentPaths.submission``), read by the daemon at each submission."""

    #: the script's file name and its absolute path when submitted (the copy in the run
    #: directory, ``ExperimentPaths.script``, is what runs)
    script_name: str
    script_path: str
    args: tuple[str, ...]
    #: where ``dethpc sbatch --search`` ran: the jobs start there (or at the user's -D)
    submit_dir: str
    #: the user's sbatch options as ``#SBATCH`` arguments, in sbatch's order of
    #: precedence (a later one wins): the script's own lines, the SBATCH_* variables,
    #: the command line
    directives: tuple[str, ...]

    def to_json(self) -> str:
        return json.dumps({"script_name": self.script_name, "script_path": self.script_path,
                           "args": list(self.args), "submit_dir": self.submit_dir,
                           "directives": list(self.directives)}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> SearchSubmission:
        d = json.loads(text)
        return cls(script_name=d["script_name"], script_path=d["script_path"],
                   args=tuple(d["args"]), submit_dir=d["submit_dir"],
                   directives=tuple(d["directives"]))

    def last(self, option: str) -> str | None:
        """The value of the last directive setting canonical ``option`` (sbatch's rule),
        "" for a flag, None when the user did not set it."""
        found = None
        for d in self.directives:
            if canonical_option(d) == option:
                found = option_value(d) or ""
        return found


    @property
    def workdir(self) -> Path:
        """sbatch's ``--chdir`` (relative to the submit directory) or the submit directory."""
        chdir = self.last("--chdir")
        return Path(self.submit_dir) / chdir if chdir else Path(self.submit_dir)


def pool_directives(cfg: ExperimentConfig, pool: ResourcePool) -> list[str]:
    """The placement of ``resources.resource_pool`` when the search file names one: its
    partition, QoS, account, default time and ``sbatch_args``, put before the user's
    directives so that the script's own lines and the command line win. Without a
    named pool, nothing: the job goes where plain ``sbatch`` would send it."""
    if cfg.resources.resource_pool is None:
        return []
    placement = [f"{flag}={value}" for flag, value in (
        ("--partition", pool.partition), ("--qos", pool.qos), ("--account", pool.account),
        ("--time", pool.default_time)) if value]
    return [*placement, *pool.sbatch_args]


def dethpc_directives(directives: Sequence[str], pool: ResourcePool) -> list[str]:
    """What dethpc adds after the user's ``directives`` (a search's, or a plain
    ``dethpc sbatch``'s): ``--requeue`` and the pool's early signal to the batch shell,
    each unless the user chose (``--no-requeue`` counts).
    ``--array``, ``--chdir``, ``--job-name`` and ``--comment`` are on sbatch's command
    line (``JobRequest``), which beats any ``#SBATCH`` line."""
    chosen = {canonical_option(d) for d in directives}
    out = []
    if not chosen & {"--requeue", "--no-requeue"}:
        out.append("--requeue")
    if "--signal" not in chosen:
        out.append(f"--signal=B:{pool.signal}@{pool.signal_grace_s}")
    return out


# ------------------------------------------------------------------ the daemon's seam
class ScriptJobs:
    """``KindJobs`` of a SCRIPT experiment (``dethpc.jobs.kinds``): each trial is the
    user's script in dethpc's wrapper; each batch an array with the user's directives."""

    def __init__(self, sub: SearchSubmission, paths: ExperimentPaths) -> None:
        self.sub, self.paths = sub, paths

    @classmethod
    def load(cls, run_dir: Path) -> ScriptJobs:
        paths = ExperimentPaths(run_dir)
        try:
            sub = SearchSubmission.from_json(paths.submission.read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError) as exc:
            raise DethpcError(f"{paths.submission}: cannot read the search's submission "
                              f"({exc}); was the run directory changed?") from None
        return cls(sub, paths)

    def workdir(self, run_dir: Path) -> Path:
        return self.sub.workdir

    def array_script(self, cfg: ExperimentConfig, cluster: ClusterConfig, *, run_dir: Path,
                     exp_id: int, batch_id: int, tasks: list[tuple[int, Path]], tag: str = "",
                     jenv: jinja2.Environment | None = None) -> str:
        from dethpc.common.version import __version__
        from dethpc.surfaces.sbatchwrap import submitenv

        pool = cluster.pool(cfg.resources.resource_pool)
        directives = [*pool_directives(cfg, pool), *self.sub.directives,
                      *dethpc_directives(self.sub.directives, pool)]
        jenv = jenv or make_env()
        return jenv.get_template(ARRAY_TEMPLATE).render(
            version=__version__, experiment_id=exp_id, batch_id=batch_id,
            script_name=self.sub.script_name, directives=directives,
            tasks=[(i, str(p)) for i, p in tasks], python=cluster.python or sys.executable,
            submitenv=str(Path(submitenv.__file__)), env_file=str(self.paths.submit_env),
            export=self.sub.last("--export") or "-")

    def verdict_script(self, cfg: ExperimentConfig, cluster: ClusterConfig, *,
                       backend: BackendKind | str, python: str, run_dir: Path) -> str:
        return self.array_script(cfg, cluster, run_dir=run_dir, exp_id=0, batch_id=0,
                                 tasks=[(0, run_dir / "job.sbatch")])

    def trial_script(self, cfg: ExperimentConfig, cluster: ClusterConfig, *,
                     backend: BackendKind | str, python: str, run_dir: Path,
                     trial: TrialJob, jenv: jinja2.Environment | None = None) -> str:
        """The trial's wrapper (``TRIAL_TEMPLATE``): the user's script copy with its
        arguments, the trial's environment (``trial_env``), the pool's early signal
        recorded for ``dethpc should-stop``, one exit record per run."""
        from dethpc.common.exitcodes import LOCAL_REQUEUE_EXIT
        from dethpc.common.traits import traits_of
        from dethpc.common.version import __version__

        traits = traits_of(backend)
        pool = cluster.pool(cfg.resources.resource_pool)
        tp = self.paths.trial(trial.trial_id)
        jenv = jenv or make_env()
        return jenv.get_template(TRIAL_TEMPLATE).render(
            version=__version__, experiment_id=trial.exp_id, trial_id=trial.trial_id,
            script_name=self.sub.script_name, backend=traits.name, trial_dir=str(tp.root),
            env=trial_env(cfg, pool, self.paths, trial), bin_dir=str(self.paths.bin),
            python=python, command=[str(self.paths.script), *self.sub.args],
            signal=pool.signal, signal_grace_s=pool.signal_grace_s,
            requeue_in_place=traits.requeue_in_place, local_requeue_exit=LOCAL_REQUEUE_EXIT)


def trial_env(cfg: ExperimentConfig, pool: ResourcePool, paths: ExperimentPaths,
              trial: TrialJob) -> list[tuple[str, str]]:
    """What a search's trial exports, in order: dethpc's job-side contract, the
    hyperparameters (``DETHPC_HPARAMS``, ``DETHPC_HP_<NAME>``) and the searcher's target
    length when the search has one."""
    tp = paths.trial(trial.trial_id)
    env = [("DETHPC_EXPERIMENT_ID", str(trial.exp_id)),
           ("DETHPC_TRIAL_ID", str(trial.trial_id)),
           ("DETHPC_TRIAL_DIR", str(tp.root)),
           ("DETHPC_EXPERIMENT_CONFIG", str(paths.config)),
           ("DETHPC_PREEMPT_SIGNAL", pool.signal),
           ("DETHPC_TRIAL_SEED", str(cfg.experiment_seed + trial.trial_id)),
           ("DETHPC_HPARAMS", str(tp.hparams)),
           *sorted(hparam_exports(trial.hparams).items())]
    if trial.target_length > 0:
        env += [("DETHPC_TARGET_LENGTH", str(trial.target_length)),
                ("DETHPC_TARGET_UNIT", trial.unit)]
    return env


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
    from dethpc.surfaces.sbatchwrap import submitenv

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


def write_shim(paths: ExperimentPaths, python: str) -> Path:
    """``<run dir>/bin/dethpc``, first on a trial's PATH: the job API of the Python that
    runs dethpc (its light entry point ``dethpc.surfaces.entry`` when installed, else the CLI),
    whatever ``python`` the user's environment has."""
    import importlib.util

    module = "dethpc.surfaces.entry" if importlib.util.find_spec("dethpc.surfaces.entry") else "dethpc.surfaces.cli.main"
    paths.bin.mkdir(parents=True, exist_ok=True)
    shim = paths.bin / "dethpc"
    shim.write_text(f"#!/bin/sh\nexec {shquote(python)} -m {module} \"$@\"\n")
    shim.chmod(0o755)
    return shim


def announce(exp_id: int, parsable: bool) -> str:
    """What ``dethpc sbatch --search`` prints: ``Submitted experiment N`` (sbatch's
    sentence, naming what was recorded: the trials' jobs come later, from the
    daemon), or ``N`` alone under ``--parsable``."""
    return str(exp_id) if parsable else f"Submitted experiment {exp_id}"
