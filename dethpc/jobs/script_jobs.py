"""The SCRIPT kind's jobs: an unchanged user script run as a search's trials.

Owns: what a SCRIPT experiment keeps beside its config (``SearchSubmission`` in
``<run dir>/context/``: the user's options, the submit directory and a copy of the
script), the kind's job scripts (``ScriptJobs``: one wrapper per trial, one array per
batch carrying the user's directives, through ``sbatch_templates/search_*.sbatch.j2``),
a trial's environment (``trial_env``, ``hparam_exports``) and the directives dethpc adds
to the user's (``pool_directives``; ``dethpc.jobs.directives.dethpc_directives``).
Must not: submit (the daemon does, through ``dethpc.jobs.kinds``), write files, touch
the store, or parse the search file (``dethpc.surfaces.sbatchwrap.search`` does).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from dethpc.common.errors import DethpcError
from dethpc.common.jobenv import (
    ENV_HPARAMS,
    ENV_TARGET_LENGTH,
    ENV_TARGET_UNIT,
    trial_contract,
)
from dethpc.common.paths import ExperimentPaths
from dethpc.common.sbatch_options import canonical_option, option_value
from dethpc.common.traits import BackendKind
from dethpc.config.model import ClusterConfig, ExperimentConfig, ResourcePool
from dethpc.jobs.directives import dethpc_directives, placement_directives
from dethpc.jobs.protocol import TrialJob
from dethpc.jobs.render import make_env, uses_gpus
from dethpc.launch.detenv import static_env
from dethpc.launch.jobapi import hparam_env

ARRAY_TEMPLATE = "search_array.sbatch.j2"


TRIAL_TEMPLATE = "search_trial.sbatch.j2"


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
    ``dethpc.launch.jobapi.hparam_env``, the one rule shared with ``dethpc hparams --env``
    (nested groups joined with ``_``, upper case, any character outside
    ``[A-Za-z0-9_]`` as ``_``; strings as they are, other values as JSON)."""
    return dict(hparam_env(dict(hparams)))


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
    return [*placement_directives(pool, pool.default_time), *pool.sbatch_args]


# ------------------------------------------------------------------ the daemon's seam
class ScriptJobs:
    """``KindJobs`` of a SCRIPT experiment (``dethpc.jobs.protocol``): each trial is the
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
        from dethpc.launch import submitenv

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
                                 tasks=[(0, ExperimentPaths(run_dir).verdict_script)])

    def trial_script(self, cfg: ExperimentConfig, cluster: ClusterConfig, *,
                     backend: BackendKind | str, python: str, run_dir: Path,
                     trial: TrialJob, jenv: jinja2.Environment | None = None) -> str:
        """The trial's wrapper (``TRIAL_TEMPLATE``): the user's script copy with its
        arguments, the trial's environment (``trial_env``), the pool's early signal
        recorded for ``dethpc should-stop``, one exit record per run."""
        from dethpc.common.traits import traits_of
        from dethpc.common.version import __version__

        traits = traits_of(backend)
        pool = cluster.pool(cfg.resources.resource_pool)
        tp = self.paths.trial(trial.trial_id)
        jenv = jenv or make_env()
        return jenv.get_template(TRIAL_TEMPLATE).render(
            version=__version__, experiment_id=trial.exp_id, trial_id=trial.trial_id,
            script_name=self.sub.script_name, backend=traits.name, trial_dir=str(tp.root),
            env=trial_env(cfg, pool, self.paths, trial, self.sub.workdir),
            bin_dir=str(self.paths.bin),
            python=python, command=[str(self.paths.script), *self.sub.args],
            signal=pool.signal, signal_grace_s=pool.signal_grace_s,
            requeue_in_place=traits.requeue_in_place)


def trial_env(cfg: ExperimentConfig, pool: ResourcePool, paths: ExperimentPaths,
              trial: TrialJob, workdir: Path | None = None) -> list[tuple[str, str]]:
    """What a search's trial exports, in order: dethpc's job-side contract, the
    hyperparameters (``DETHPC_HPARAMS``, ``DETHPC_HP_<NAME>``), the searcher's target
    length when the search has one, and Determined's ``DET_*`` variables known before the
    run (``dethpc.launch.detenv.static_env``; the wrapper adds the rest as it starts)."""
    tp = paths.trial(trial.trial_id)
    env = trial_contract(experiment_id=trial.exp_id, trial_id=trial.trial_id,
                         trial_dir=str(tp.root), config=str(paths.config), signal=pool.signal,
                         seed=cfg.experiment_seed + trial.trial_id)
    env += [(ENV_HPARAMS, str(tp.hparams)), *sorted(hparam_exports(trial.hparams).items())]
    if trial.target_length > 0:
        env += [(ENV_TARGET_LENGTH, str(trial.target_length)), (ENV_TARGET_UNIT, trial.unit)]
    env += static_env(experiment_id=trial.exp_id, trial_id=trial.trial_id,
                      trial_seed=cfg.experiment_seed + trial.trial_id, config=cfg.raw,
                      gpus=uses_gpus(cfg, pool), workdir=str(workdir or paths.context),
                      ifname=pool.socket_ifname)
    return env
