"""The per-rank shim: ``python -m dethpc.launch._worker -- <argv>``.

Owns: turning the task's identity (``RANK``... when torchrun set them, else
``SLURM_PROCID``/``SLURM_LOCALID``/``SLURM_NODEID``) into the torch-style rank
variables, optional per-rank GPU isolation, and running ``<argv>`` as a child
whose output lines carry ``[rank=N]`` and which receives forwarded signals.
The shim exits with the child's exit code.
Must not: start other ranks or call ``srun`` (it runs once per task).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from dethpc.launch._common import LaunchError, gpu_env, read_slurm_env
from dethpc.launch._procs import launcher_main, run_one, setup_logging


def worker_env(env: Mapping[str, str]) -> dict[str, str]:
    """The full environment of the child: ``env`` plus the rank variables it lacks.

    Variables already set (by torchrun, or by the user) win over Slurm's.
    """
    senv = read_slurm_env(env)
    local_world = int(env.get("LOCAL_WORLD_SIZE") or senv.local_world_size)
    derived = {
        "RANK": str(senv.procid),
        "LOCAL_RANK": str(senv.localid),
        "WORLD_SIZE": str(senv.ntasks),
        "LOCAL_WORLD_SIZE": str(local_world),
        "GROUP_RANK": str(senv.nodeid),
        "GROUP_WORLD_SIZE": str(senv.nnodes),
        "NODE_RANK": str(senv.nodeid),
        # DeepSpeed's spellings (Determined's DistributedContext.from_deepspeed reads them)
        "LOCAL_SIZE": str(local_world),
        "CROSS_RANK": str(senv.nodeid),
        "CROSS_SIZE": str(senv.nnodes),
    }
    out = dict(env)
    for key, value in derived.items():
        out.setdefault(key, value)
    out.update(gpu_env(env, int(out["LOCAL_RANK"]), local_world))
    out.setdefault("PYTHONUNBUFFERED", "1")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        raise LaunchError("usage: python -m dethpc.launch._worker -- <command> [args]")
    env = worker_env(os.environ)
    return run_one(args, env, rank=int(env["RANK"]))


if __name__ == "__main__":
    sys.exit(launcher_main(main))
