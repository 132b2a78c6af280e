"""Rendering of job scripts: directives built in Python, layout in Jinja2.

Owns: the trial job
script (``render_trial_script``) and its environment (``trial_env``: dethpc's contract
and Determined's ``DET_*`` variables), the array script that maps array task ids to
trial scripts (``render_array_script``) and the entrypoint -> argv rule. The Jinja2
environment they render with is ``dethpc.jobs.templates``' (re-exported here).
Must not: write files or run commands (the daemon writes what this returns), or
make directives (``dethpc.jobs.directives`` owns every ``#SBATCH`` line).
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from dethpc.common.errors import SubmitError
from dethpc.common.jobenv import (
    ENV_BACKEND,
    ENV_CHECKPOINT_DIR,
    ENV_CONTEXT_DIR,
    ENV_SLOTS_PER_TRIAL,
    ENV_SOCKET_IFNAME,
    trial_contract,
)
from dethpc.common.sbatch_options import parse_time
from dethpc.common.traits import BackendTraits
from dethpc.common.version import __version__
from dethpc.config.model import ClusterConfig, ExperimentConfig, ResourcePool
from dethpc.jobs.templates import make_env, shjoin, shquote, template_dir  # noqa: F401
from dethpc.launch._determined import from_determined
from dethpc.launch.detenv import static_env

TRIAL_TEMPLATE = "trial.sbatch.j2"
ARRAY_TEMPLATE = "array.sbatch.j2"
_TRIAL_CLASS = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_LAUNCHER = re.compile(r"^dethpc\.launch\.\w+$")
#: Determined's startup hook: a file at the root of the context directory
STARTUP_HOOK = "startup-hook.sh"
#: How one node runs it: sourced under ``set -e`` (as Determined's entrypoint does), then
#: the variables it exported or changed are written NUL-separated to ``$1.<node id>``,
#: for the job script to export to the training step (``$0`` names it in messages).
HOOK_RUNNER = r"""set -e
declare -A dethpc_env_before
while IFS= read -r -d "" kv; do dethpc_env_before["${kv%%=*}"]="${kv#*=}"; done < <(env -0)
source ./startup-hook.sh
dethpc_env_out="$1.${SLURM_NODEID:-0}"
while IFS= read -r -d "" kv; do
  name="${kv%%=*}"
  case "$name" in _|SHLVL|PWD|OLDPWD|*[!A-Za-z0-9_]*|[0-9]*) continue ;; esac
  if [ "${dethpc_env_before[$name]+set}" != set ] \
      || [ "${dethpc_env_before[$name]}" != "${kv#*=}" ]; then printf "%s\0" "$kv"; fi
done < <(env -0) >"$dethpc_env_out.tmp"
mv -f "$dethpc_env_out.tmp" "$dethpc_env_out"
"""


def startup_hook_argv(env_prefix: Path) -> list[str]:
    """argv that runs ``startup-hook.sh`` on one node (see ``HOOK_RUNNER``)."""
    return ["bash", "-c", HOOK_RUNNER, STARTUP_HOOK, str(env_prefix)]


# ------------------------------------------------------------------ pure helpers
def parse_slurm_time(value: str | None) -> int | None:
    """sbatch ``--time`` syntax -> seconds (None for unset/UNLIMITED); a config's bad
    value is a submit error (``dethpc.common.sbatch_options.parse_time`` is the grammar)."""
    try:
        return parse_time(value)
    except ValueError:
        raise SubmitError(f"time limit {value!r} is not in sbatch --time syntax") from None


def entrypoint_argv(entrypoint: str | Sequence[str], python: str) -> list[str]:
    """The command a trial runs. ``module:Class`` runs a Trial class through
    ``dethpc.pytorch.run``; a string is split like a shell would (no expansion);
    a list is taken as argv. Determined's launchers (``python3 -m
    determined.launch.torch_distributed ...``) become dethpc's
    (``dethpc.launch._determined``)."""
    if isinstance(entrypoint, str):
        if _TRIAL_CLASS.match(entrypoint.strip()):
            return [python, "-m", "dethpc.pytorch.run", entrypoint.strip()]
        argv = shlex.split(entrypoint)
    else:
        argv = [str(a) for a in entrypoint]
    if not argv:
        raise SubmitError("entrypoint is empty")
    return from_determined(argv)


def is_launcher(argv: Sequence[str]) -> bool:
    """True when the command runs ``python -m dethpc.launch.<name>``, directly or behind
    wrapper commands (``numactl ... python -m dethpc.launch.torch_distributed ...``):
    such a launcher calls srun itself. Only the part before a ``--`` counts, so a
    launcher named as some other program's argument list after ``--`` does not."""
    head = list(argv[: argv.index("--")] if "--" in argv else argv)
    return any(head[i] == "-m" and bool(_LAUNCHER.match(head[i + 1]))
               for i in range(1, len(head) - 1))


# ------------------------------------------------------------------ rendering
@dataclass(frozen=True)
class TrialScript:
    """Everything the trial template needs (``env`` is exported, in order)."""

    experiment_id: int
    trial_id: int
    traits: BackendTraits
    directives: list[str]
    trial_dir: Path
    context_dir: Path
    command: list[str]
    env: list[tuple[str, str]] = field(default_factory=list)
    python: str = sys.executable
    signal: str = "USR2"
    signal_grace_s: int = 120
    #: het-job component names (group 1..n) and the srun argv starting each
    component_names: tuple[str, ...] = ()
    component_steps: list[list[str]] = field(default_factory=list)
    #: how one node runs the context's ``startup-hook.sh`` (inside the trial's image when
    #: it has one); on Slurm the template starts it once per node through ``srun``
    hook_command: list[str] = field(default_factory=list)
    #: where the hook leaves its exports (``startup_hook_argv``); node 0's are exported
    hook_env: Path | None = None


def render_trial_script(ts: TrialScript, jenv: jinja2.Environment | None = None) -> str:
    jenv = jenv or make_env()
    return jenv.get_template(TRIAL_TEMPLATE).render(
        version=__version__, experiment_id=ts.experiment_id, trial_id=ts.trial_id,
        backend=ts.traits.name, requeue_in_place=ts.traits.requeue_in_place,
        directives=ts.directives, trial_dir=str(ts.trial_dir),
        context_dir=str(ts.context_dir), command=ts.command, env=ts.env,
        python_bin=str(Path(ts.python).parent), signal=ts.signal,
        signal_grace_s=ts.signal_grace_s, component_steps=ts.component_steps,
        component_names=",".join(("trial", *ts.component_names)),
        srun_steps=ts.traits.srun_steps, hook_env=str(ts.hook_env or _hook_env(ts)),
        python=ts.python,
        hook_command=ts.hook_command or startup_hook_argv(ts.hook_env or _hook_env(ts)))


def _hook_env(ts: TrialScript) -> Path:
    from dethpc.common.paths import TrialPaths

    return TrialPaths(ts.trial_dir).startup_hook_env


def render_array_script(*, experiment_id: int, batch_id: int, directives: Sequence[str],
                        tasks: Sequence[tuple[int, Path]],
                        jenv: jinja2.Environment | None = None) -> str:
    jenv = jenv or make_env()
    return jenv.get_template(ARRAY_TEMPLATE).render(
        version=__version__, experiment_id=experiment_id, batch_id=batch_id,
        directives=list(directives), tasks=[(i, str(p)) for i, p in tasks])


def uses_gpus(cfg: ExperimentConfig, pool: ResourcePool) -> bool:
    """Does a trial of ``cfg`` get GPUs in ``pool`` (its slots are GPUs)?"""
    return (pool.gres is not None and pool.gres.split(":", 1)[0] == "gpu"
            and cfg.resources.slots_per_trial > 0)


def trial_env(cfg: ExperimentConfig, cluster: ClusterConfig, pool: ResourcePool, *,
              experiment_id: int, trial_id: int, trial_dir: Path, context_dir: Path,
              checkpoint_dir: Path, config_path: Path, backend: str,
              extra: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The environment a trial's job exports: dethpc's contract, Determined's ``DET_*``
    variables known before the run starts (``dethpc.launch.detenv.static_env``; the job
    script adds the rest when the run starts), then the user's."""
    seed = cfg.experiment_seed + trial_id
    env = trial_contract(experiment_id=experiment_id, trial_id=trial_id,
                         trial_dir=str(trial_dir), config=str(config_path),
                         signal=pool.signal, seed=seed)
    env += [(ENV_CHECKPOINT_DIR, str(checkpoint_dir)), (ENV_CONTEXT_DIR, str(context_dir)),
            (ENV_BACKEND, backend),
            (ENV_SLOTS_PER_TRIAL, str(cfg.resources.slots_per_trial))]
    if pool.socket_ifname:
        env.append((ENV_SOCKET_IFNAME, pool.socket_ifname))
    env += static_env(experiment_id=experiment_id, trial_id=trial_id,
                      trial_seed=cfg.experiment_seed + trial_id, config=cfg.raw,
                      gpus=uses_gpus(cfg, pool), workdir=str(context_dir),
                      ifname=pool.socket_ifname)
    env += list((extra or {}).items())
    user_env = cfg.environment.environment_variables
    if pool.gres and cfg.environment.environment_variables_gpu is not None:
        user_env = cfg.environment.environment_variables_gpu
    env += list(user_env.items())
    for key, _ in env:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise SubmitError(f"environment variable name {key!r} is not a valid identifier")
    return env
