"""The per-rank shim: ``python -m dethpc.launch._worker -- <argv>``.

Owns: running ``<argv>`` as one rank's child (the rank variables and per-rank GPU
isolation of ``dethpc.launch._common.worker_env``) whose output lines carry
``[rank=N]`` and which receives forwarded signals.
The shim exits with the child's exit code.
Must not: start other ranks or call ``srun`` (it runs once per task).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from dethpc.launch._common import LaunchError, worker_env
from dethpc.launch._procs import launcher_main, run_one, setup_logging


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
