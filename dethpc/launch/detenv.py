"""Determined's ``DET_*`` variables of a trial, with the values Determined would give.

Owns: how each ``DET_*`` variable of a trial gets its value. Which ones a trial's processes
see, and who sets each, is the table in ``dethpc.common.jobenv`` (``STATIC``, ``RUN``,
``NODE`` and ``LAUNCHER`` are read from it); ``dethpc.core.determined_rules.ENV_RULES``
says why Determined's others are absent:

* ``static_env``: what is known when the job script is rendered (the ids, the task type,
  the experiment config as JSON, the slot type, the working directory, the network
  interface); ``dethpc.jobs`` exports these in the script;
* ``run_env``: what a run learns when it starts (the run number, the hyperparameters, the
  checkpoint it resumes from, this node's name and slots, the cluster, the job, the
  user); ``python -m dethpc.launch.run_start --det-env`` (a trial's script; ``python -m
  dethpc.launch.detenv`` in a wrapped script) prints them as ``export`` lines, which the
  job script evaluates, and the worker pool calls it for each trial it runs;
* ``node_env``: the per-node part of ``run_env``, which dethpc's per-rank shim sets again
  on every node (the batch shell's values are the first node's).

Must not: verify checkpoint checksums (the training code does; here the newest complete
checkpoint is named from its ``metadata.json``), import yaml or torch, or write files.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dethpc.common import jobenv, slots
from dethpc.common.jobenv import (
    ENV_CHECKPOINT_DIR,
    ENV_DET_AGENT_ID,
    ENV_DET_ALLOCATION_ID,
    ENV_DET_CLUSTER_ID,
    ENV_DET_CONTAINER_ID,
    ENV_DET_EXPERIMENT_CONFIG,
    ENV_DET_EXPERIMENT_ID,
    ENV_DET_HPARAMS,
    ENV_DET_INTER_NODE_NETWORK_INTERFACE,
    ENV_DET_LATEST_CHECKPOINT,
    ENV_DET_RESOURCES_ID,
    ENV_DET_RESOURCES_TYPE,
    ENV_DET_SLOT_IDS,
    ENV_DET_SLOT_TYPE,
    ENV_DET_STEPS_COMPLETED,
    ENV_DET_TASK_ID,
    ENV_DET_TASK_TYPE,
    ENV_DET_TRIAL_ID,
    ENV_DET_TRIAL_RUN_ID,
    ENV_DET_TRIAL_SEED,
    ENV_DET_UNIQUE_PORT_OFFSET,
    ENV_DET_USER,
    ENV_DET_WORKDIR,
    ENV_EXPERIMENT_ID,
    ENV_RUN_ID,
    ENV_TRIAL_DIR,
    ENV_TRIAL_ID,
    Setter,
)
from dethpc.common.paths import TrialPaths

#: an environment variable longer than this cannot be passed to exec (Linux's
#: MAX_ARG_STRLEN is 128 KiB): such a value is left out, with a note in the script
MAX_VALUE_BYTES = 131_072 - 64

#: the variables ``static_env`` sets (the table's ``DET_*`` rows the job script sets)
STATIC = jobenv.determined(set_by=Setter.SCRIPT)
#: the variables ``run_env`` sets (the rows set at each run's start)
RUN = jobenv.determined(set_by=Setter.RUN_START)
#: the variables ``node_env`` sets (a subset of ``run_env``'s: the launchers set them again)
NODE = tuple(name for name in RUN if Setter.LAUNCHER in jobenv.BY_NAME[name].set_by)
#: set by dethpc's launchers only (``dethpc.launch._common.rendezvous_env``)
LAUNCHER = jobenv.determined(set_by=Setter.LAUNCHER, without=Setter.RUN_START)


def config_json(config: Mapping[str, Any]) -> str:
    """The experiment config as Determined passes it: compact JSON, non-ASCII kept."""
    return json.dumps(config, separators=(",", ":"), ensure_ascii=False, default=str)


def static_env(*, experiment_id: int, trial_id: int, trial_seed: int,
               config: Mapping[str, Any], gpus: bool, workdir: str,
               ifname: str | None = None) -> list[tuple[str, str]]:
    """The ``DET_*`` variables a job script exports, in order (``STATIC``)."""
    env = [(ENV_DET_EXPERIMENT_ID, str(experiment_id)), (ENV_DET_TRIAL_ID, str(trial_id)),
           (ENV_DET_TRIAL_SEED, str(trial_seed)),
           (ENV_DET_TASK_ID, f"{experiment_id}.{trial_id}"), (ENV_DET_TASK_TYPE, "TRIAL"),
           (ENV_DET_RESOURCES_TYPE, "slurm-job"), (ENV_DET_SLOT_TYPE, "cuda" if gpus else "cpu"),
           (ENV_DET_WORKDIR, workdir)]
    text = config_json(config)
    if len(text.encode()) <= MAX_VALUE_BYTES:
        env.append((ENV_DET_EXPERIMENT_CONFIG, text))
    if ifname:
        env.append((ENV_DET_INTER_NODE_NETWORK_INTERFACE, ifname))
    return env


def _int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    return int(raw) if raw.isdigit() else None


def node_env(env: Mapping[str, str]) -> dict[str, str]:
    """This node's name, container id, slots and port offset (``NODE``)."""
    ids = slots.slot_ids(env)
    gpus = slots.gpu_devices(env)
    first = gpus[0] if gpus and gpus[0].isdigit() else "0"
    return {ENV_DET_AGENT_ID: slots.agent_id(env),
            ENV_DET_CONTAINER_ID: f"[cont={slots.node_index(env)}]",
            ENV_DET_SLOT_IDS: json.dumps(ids, separators=(",", ":")),
            ENV_DET_UNIQUE_PORT_OFFSET: first}


def latest_complete(checkpoints: Path) -> tuple[str, int] | None:
    """(uuid, steps_completed) of the complete checkpoint with the most steps (latest
    time on ties) from the ``metadata.json`` files alone, or None."""
    best: tuple[int, float, str] | None = None
    try:
        entries = list(checkpoints.iterdir())
    except OSError:
        return None
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            meta = json.loads((entry / "metadata.json").read_text(encoding="utf-8"))
            steps, when = int(meta["steps_completed"]), float(meta.get("time", 0.0))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if best is None or (steps, when) > best[:2]:
            best = (steps, when, entry.name)
    return None if best is None else (best[2], best[0])


def run_env(env: Mapping[str, str]) -> dict[str, str]:
    """The ``DET_*`` variables a run learns when it starts (``RUN``), from Slurm's
    environment and the trial directory; ``DET_LATEST_CHECKPOINT`` only when there is
    one, ``DET_HPARAMS`` only when hparams.json is readable."""
    run = _int(env, ENV_RUN_ID)
    run = run if run is not None else (_int(env, "SLURM_RESTART_COUNT") or 0)
    out = {ENV_DET_TRIAL_RUN_ID: str(run + 1),
           ENV_DET_ALLOCATION_ID: f"{env.get(ENV_EXPERIMENT_ID, '0')}."
                                f"{env.get(ENV_TRIAL_ID, '0')}.{run + 1}",
           **node_env(env),
           ENV_DET_CLUSTER_ID: env.get("SLURM_CLUSTER_NAME", ""),
           ENV_DET_RESOURCES_ID: env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "",
           ENV_DET_USER: env.get("USER") or env.get("LOGNAME") or ""}
    trial = env.get(ENV_TRIAL_DIR)
    steps = 0
    if trial:
        paths = TrialPaths(Path(trial))
        try:
            hparams = json.loads(paths.hparams.read_text(encoding="utf-8"))
            text = json.dumps(hparams, separators=(",", ":"), ensure_ascii=False)
            if len(text.encode()) <= MAX_VALUE_BYTES:
                out[ENV_DET_HPARAMS] = text
        except (OSError, ValueError):
            pass
        ckpt_dir = Path(env[ENV_CHECKPOINT_DIR]) if env.get(ENV_CHECKPOINT_DIR) \
            else paths.checkpoints
        latest = latest_complete(ckpt_dir)
        if latest is not None:
            out[ENV_DET_LATEST_CHECKPOINT], steps = latest
    out[ENV_DET_STEPS_COMPLETED] = str(steps)
    return out


def export_lines(values: Mapping[str, str]) -> str:
    """``export NAME='value'`` lines for bash's ``eval`` (every value shell-quoted)."""
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in values.items())


def exports(env: Mapping[str, str], *, node: bool = False) -> str:
    """The run's ``DET_*`` variables (``node``: only this node's) as ``export`` lines for
    ``env``. Never fails a job: a problem (lines that stdout cannot write included: a
    value that is not valid in its encoding) gives no lines, and a note on stderr."""
    try:
        values = node_env(env) if node else run_env(env)
        if not node:  # `import determined` means dethpc unless one is installed
            from dethpc.launch.determined_alias import alias_env

            values.update(alias_env(env))
        lines = export_lines(values)
        lines.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict")
    except Exception as exc:  # noqa: BLE001 - the job runs on without these variables
        print(f"dethpc: DET_* variables not set: {exc}", file=sys.stderr)
        return ""
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m dethpc.launch.detenv``: the run's ``DET_*`` variables as export lines
    (``--node``: only this node's). Trial scripts get the same lines from their first
    python (``python -m dethpc.launch.run_start --det-env``); this entry stays for
    scripts rendered before, and for ``dethpc sbatch``'s wrapped scripts."""
    args = sys.argv[1:] if argv is None else argv
    sys.stdout.write(exports(os.environ, node="--node" in args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
