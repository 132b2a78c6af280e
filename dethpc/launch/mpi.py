"""``python -m dethpc.launch.mpi [srun overrides --] program args`` for MPI programs.

Owns: the MPI launch plan: ``srun --mpi=<plugin>`` with one task per slot
(the plugin is what ``srun --mpi=list`` offers, pmix preferred over pmi2,
asked once per process and cached; ``DETHPC_MPI`` overrides), and Open MPI's
``OMPI_MCA_btl=self,tcp`` when several nodes share one host (shared-memory
transport crashes there, see SLURM_DEV_CLUSTER.md) or ``DETHPC_MPI_BTL`` says
so. Off Slurm: ``mpirun -np N`` on this machine. Also used by the horovod
launcher (``mpi_plan``).
Must not: use ssh or a hostfile (srun places the ranks).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable, Mapping, Sequence

from dethpc.common.errors import CommandError
from dethpc.common.jobenv import ENV_MPI, ENV_MPI_BTL
from dethpc.common.runner import CommandRunner
from dethpc.launch._common import (
    JobLayout,
    LaunchError,
    LaunchPlan,
    in_step_worker_plan,
    local_layout,
    local_nproc,
    parse_launcher_args,
    read_slurm_env,
    single_plan,
    slurm_layout,
    srun_workers_plan,
    use_slurm,
)
from dethpc.launch._procs import execute, launcher_main

PLUGIN_PREFERENCE = ("pmix", "pmi2")
OPTIONS = ("--nproc",)
_PLUGIN_CACHE: dict[str, str] = {}


def parse_mpi_list(text: str) -> list[str]:
    """Plugin names from ``srun --mpi=list`` (22.05 and 23+ output formats)."""
    names = []
    for line in text.splitlines():
        word = "" if "types are" in line else line.strip().split(":")[-1].strip()
        for token in word.replace(",", " ").split():
            if token.isidentifier() and token not in names:
                names.append(token)
    return names


def choose_plugin(available: Sequence[str]) -> str:
    for name in PLUGIN_PREFERENCE:
        if name in available:
            return name
    raise LaunchError(
        f"srun offers no PMI plugin for MPI (offers: {', '.join(available) or 'nothing'}); "
        f"ask the admins for pmix (MpiDefault/--mpi=pmix) or set {ENV_MPI}"
    )


def detect_plugin(runner: CommandRunner | None = None) -> str:
    """Ask ``srun --mpi=list`` once per process (cached) and pick the preferred plugin."""
    if "plugin" not in _PLUGIN_CACHE:
        try:
            result = (runner or CommandRunner(timeout=30)).run(["srun", "--mpi=list"],
                                                               retry=False)
        except CommandError as exc:
            raise LaunchError(f"cannot list srun's MPI plugins: {exc}") from exc
        text = result.stdout + "\n" + result.stderr
        _PLUGIN_CACHE["plugin"] = choose_plugin(parse_mpi_list(text))
    return _PLUGIN_CACHE["plugin"]


def btl_env(
    hosts: Sequence[str],
    env: Mapping[str, str],
    resolve: Callable[[str], str] = socket.gethostbyname,
) -> dict[str, str]:
    """``OMPI_MCA_btl`` when nodes share a host (or ``DETHPC_MPI_BTL`` asks)."""
    if env.get("OMPI_MCA_btl"):
        return {}
    if env.get(ENV_MPI_BTL):
        return {"OMPI_MCA_btl": env[ENV_MPI_BTL]}
    addresses = []
    for host in hosts:
        try:
            addresses.append(resolve(host))
        except OSError:
            addresses.append(host)
    if len(set(addresses)) < len(addresses):
        return {"OMPI_MCA_btl": "self,tcp"}
    return {}


def mpirun_argv(nproc: int, target_argv: Sequence[str]) -> list[str]:
    return ["mpirun", "--oversubscribe", "--tag-output", "-np", str(nproc), *target_argv]


def mpi_plan(
    target_argv: Sequence[str],
    env: Mapping[str, str],
    *,
    overrides: Sequence[str] = (),
    nproc: str | None = None,
    which: Callable[[str], str | None] = shutil.which,
    plugin: Callable[[], str] | None = None,
    resolve: Callable[[str], str] = socket.gethostbyname,
    python: str = sys.executable,
) -> LaunchPlan:
    """The plan for an MPI program (mpi4py, horovod-with-MPI)."""
    if not use_slurm(env, which):
        return _local_plan(target_argv, env, nproc, which)
    senv = read_slurm_env(env)
    layout: JobLayout = slurm_layout(senv, env)
    extra = btl_env(layout.hosts, env, resolve)
    if senv.in_step:
        return in_step_worker_plan(target_argv, layout, {**env, **extra})
    name = env.get(ENV_MPI) or (plugin or detect_plugin)()
    return srun_workers_plan(layout, target_argv, env, mpi=name, extra_srun=overrides,
                             extra_env=extra, python=python)


def _local_plan(
    target_argv: Sequence[str],
    env: Mapping[str, str],
    nproc: str | None,
    which: Callable[[str], str | None],
) -> LaunchPlan:
    count = local_nproc(env, nproc)
    if count > 1 and which("mpirun") is None:
        raise LaunchError(f"{count} MPI ranks asked off Slurm but mpirun is not on PATH; "
                          f"install Open MPI or run inside a Slurm allocation")
    if count == 1:
        layout = local_layout(1, env)
        return in_step_worker_plan(target_argv, layout, {**env, "SLURM_PROCID": "0"})
    run_env = {**env, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    run_env.pop("SLURM_JOB_ID", None)  # mpirun must not try to use a Slurm it cannot reach
    return single_plan(mpirun_argv(count, target_argv), run_env,
                       notes=(f"local launch: mpirun with {count} rank(s)",))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_launcher_args(sys.argv[1:] if argv is None else argv, OPTIONS)
    return execute(mpi_plan(args.target.python_argv(), os.environ,
                            overrides=args.overrides, nproc=args.options.get("nproc")))


if __name__ == "__main__":
    sys.exit(launcher_main(main))
