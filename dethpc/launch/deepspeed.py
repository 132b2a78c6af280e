"""``python -m dethpc.launch.deepspeed [overrides --] script.py args``.

Owns: the DeepSpeed launch plans. Mode (``--mode`` or ``DETHPC_LAUNCH_MODE``):

* ``srun`` (default): one Slurm task per slot, torch-style rank variables from
  the per-rank shim; ``deepspeed.init_distributed()`` reads them (no ssh, no
  pdsh, no mpi4py discovery). Overrides go to ``srun``.
* ``hostfile``: writes a DeepSpeed hostfile (``n1 slots=2`` per node) and runs
  the ``deepspeed`` CLI with ``--launcher slurm`` (DeepSpeed's own ``srun``
  runner, which discovers ranks through mpi4py, hence ``--mpi=<plugin>`` in
  ``--launcher_args``). Overrides go to ``deepspeed``.

Like DeepSpeed, ``.deepspeed_env`` files (``KEY=VALUE`` lines; name from
``DS_ENV_FILE``) in the home directory and then the working directory are
exported to every worker, the latter winning.
Must not: ssh anywhere, or duplicate the srun/worker logic of ``_common``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from dethpc.common.jobenv import ENV_LAUNCH_MODE, ENV_MPI, ENV_TRIAL_DIR
from dethpc.launch._common import (
    JobLayout,
    LaunchError,
    LaunchPlan,
    in_step_worker_plan,
    local_layout,
    local_nproc,
    local_workers,
    parse_launcher_args,
    read_slurm_env,
    rendezvous_env,
    single_plan,
    slurm_layout,
    socket_env,
    srun_workers_plan,
    use_slurm,
)
from dethpc.launch._procs import execute, launcher_main

MODES = ("srun", "hostfile")
OPTIONS = ("--mode",)


def deepspeed_env_files(env: Mapping[str, str], cwd: Path, home: Path) -> list[Path]:
    """Where DeepSpeed looks for its env file, in the order it applies them."""
    name = env.get("DS_ENV_FILE", ".deepspeed_env")
    return [home / name, cwd / name]


def read_deepspeed_env(paths: Sequence[Path]) -> dict[str, str]:
    """``KEY=VALUE`` lines of every existing file; later files win; blanks and # skipped."""
    out: dict[str, str] = {}
    for path in paths:
        if not path.is_file():
            continue
        for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, eq, value = line.partition("=")
            if not eq or not key.strip().isidentifier():
                raise LaunchError(f"{path}:{number}: expected KEY=VALUE, got {raw!r}")
            out[key.strip()] = value
    return out


def hostfile_text(layout: JobLayout) -> str:
    """DeepSpeed's hostfile for the allocation: one ``host slots=N`` line per node."""
    return "".join(f"{host} slots={layout.tasks_per_node}\n" for host in layout.hosts)


def hostfile_argv(
    layout: JobLayout, hostfile: str, target_tokens: Sequence[str], *,
    mpi: str = "pmix", overrides: Sequence[str] = (),
) -> list[str]:
    """The ``deepspeed`` CLI line for ``--launcher slurm`` (its own srun runner)."""
    if target_tokens and target_tokens[0] == "-m":
        head = ["--module", *target_tokens[1:2]]
        rest = list(target_tokens[2:])
    else:
        head, rest = list(target_tokens[:1]), list(target_tokens[1:])
    return [
        "deepspeed", f"--hostfile={hostfile}", "--launcher=slurm", f"--launcher_args=--mpi={mpi}",
        f"--num_nodes={layout.nnodes}", f"--master_addr={layout.master_addr}",
        f"--master_port={layout.master_port}", "--no_ssh_check", *overrides, *head, *rest,
    ]


def plan(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: Path | None = None,
    home: Path | None = None,
    which: Callable[[str], str | None] = shutil.which,
    python: str = sys.executable,
) -> LaunchPlan:
    """Decide what to run for ``argv`` in ``env`` (pure apart from reading env files)."""
    args = parse_launcher_args(argv, OPTIONS)
    mode = args.options.get("mode") or env.get(ENV_LAUNCH_MODE) or "srun"
    if mode not in MODES:
        raise LaunchError(f"unknown deepspeed launch mode {mode!r}; use one of {', '.join(MODES)}")
    files = deepspeed_env_files(env, cwd or Path.cwd(), home or Path.home())
    env = {**env, **read_deepspeed_env(files)}
    target_argv = args.target.python_argv(python)
    if not use_slurm(env, which):
        layout = local_layout(local_nproc(env), env)
        return LaunchPlan("workers", workers=local_workers(target_argv, layout, env))
    senv = read_slurm_env(env)
    layout = slurm_layout(senv, env)
    if senv.in_step:
        return in_step_worker_plan(target_argv, layout, env)
    if mode == "srun":
        return srun_workers_plan(layout, target_argv, env, extra_srun=args.overrides,
                                 python=python)
    hostfile = str(Path(env.get(ENV_TRIAL_DIR) or (cwd or Path.cwd()))
                   / f".dethpc-hostfile-{layout.job_id}")
    from dethpc.launch.mpi import detect_plugin

    out = hostfile_argv(layout, hostfile, args.target.tokens(),
                        mpi=env.get(ENV_MPI) or detect_plugin(), overrides=args.overrides)
    run_env = {**env, **socket_env(env), **rendezvous_env(layout)}
    return single_plan(out, run_env, files=((hostfile, hostfile_text(layout)),))


def main(argv: Sequence[str] | None = None) -> int:
    return execute(plan(sys.argv[1:] if argv is None else argv, os.environ))


if __name__ == "__main__":
    sys.exit(launcher_main(main))
