"""``python -m dethpc.launch.horovod [srun overrides --] script.py args``.

Owns: the Horovod launch: first a check that ``horovod`` is importable (with
a clear message when it is not), then the MPI plan of ``dethpc.launch.mpi``:
one Slurm task per slot under ``srun --mpi=pmix``, Horovod's MPI controller
picking up ranks from PMIx. ``horovodrun`` is not used: it needs ssh between
nodes (``--gloo`` too), which Slurm clusters do not promise.
Must not: build its own srun argv (``mpi.mpi_plan`` does).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence

from dethpc.launch._common import LaunchError, parse_launcher_args
from dethpc.launch._procs import execute, launcher_main
from dethpc.launch.mpi import OPTIONS, mpi_plan

NOT_IMPORTABLE = (
    "horovod is not importable here: {reason} (Horovod 0.28.1 does not build against "
    "torch 2.13 without patches; see docs/launchers.md)"
)


def check_horovod(importer: Callable[[str], object] = importlib.import_module) -> None:
    """Raise ``LaunchError`` unless ``horovod`` imports in this environment."""
    try:
        importer("horovod")
    except Exception as exc:  # noqa: BLE001 - any import failure means the same to the user
        raise LaunchError(NOT_IMPORTABLE.format(reason=f"{type(exc).__name__}: {exc}")) from exc


def horovod_env() -> dict[str, str]:
    """Horovod settings that suit srun-placed MPI ranks."""
    return {"HOROVOD_MPI_THREADS_DISABLE": "0", "PYTHONUNBUFFERED": "1"}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_launcher_args(sys.argv[1:] if argv is None else argv, OPTIONS)
    check_horovod()
    env = {**os.environ, **horovod_env()}
    return execute(mpi_plan(args.target.python_argv(), env, overrides=args.overrides,
                            nproc=args.options.get("nproc")))


if __name__ == "__main__":
    sys.exit(launcher_main(main))
