"""``python -m dethpc.launch.torch_distributed [overrides --] script.py args``.

Owns: the torch.distributed launch plans. Two modes (``--mode`` or env
``DETHPC_LAUNCH_MODE``, default ``srun``):

* ``srun``: one Slurm task per slot (``srun --ntasks-per-node=P``), each task
  runs the per-rank shim which sets RANK/LOCAL_RANK/WORLD_SIZE/... from
  SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS. Overrides go to ``srun``.
* ``torchrun``: one task per node (``srun --ntasks-per-node=1``) re-enters this
  module, which then ``exec``s ``torchrun --nnodes=N --nproc-per-node=P
  --node-rank=$SLURM_NODEID --master-addr --master-port`` (static rendezvous,
  node rank from Slurm). Overrides go to ``torchrun`` (after ours, so they win).

Inside a step already (``SLURM_STEP_ID`` set) srun is not called again. Off
Slurm (no job id, ``DETHPC_BACKEND=local`` or no ``srun``) the ranks are
started here on one machine. ``build_argv``/``build_env`` are pure.
Must not: contain process handling (``_procs``) or env parsing (``_common``).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence

from dethpc.common.jobenv import (
    ENV_LAUNCH_MODE,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_NPROC_PER_NODE,
)
from dethpc.launch._common import (
    JobLayout,
    LauncherArgs,
    LaunchError,
    LaunchPlan,
    Target,
    container_of,
    in_step_worker_plan,
    local_layout,
    local_nproc,
    local_workers,
    override_value,
    parse_launcher_args,
    read_slurm_env,
    rendezvous_env,
    single_plan,
    slurm_layout,
    socket_env,
    srun_argv,
    srun_workers_plan,
    use_slurm,
    worker_argv,
)
from dethpc.launch._procs import execute, launcher_main

MODES = ("srun", "torchrun")
DEFAULT_MODE = "srun"
OPTIONS = ("--mode",)
NPROC_NAMES = ("--nproc-per-node", "--nproc_per_node")


def choose_mode(args: LauncherArgs, env: Mapping[str, str]) -> str:
    mode = args.options.get("mode") or env.get(ENV_LAUNCH_MODE) or DEFAULT_MODE
    if mode not in MODES:
        raise LaunchError(f"unknown launch mode {mode!r}; use one of {', '.join(MODES)}")
    return mode


def build_argv(
    mode: str,
    target: Target,
    layout: JobLayout,
    *,
    in_step: bool,
    node_rank: int = 0,
    overrides: Sequence[str] = (),
    cpus_per_task: int | None = None,
    python: str = sys.executable,
    prefix: Sequence[str] = (),
) -> list[str]:
    """The argv this launcher runs under Slurm (batch shell or inside a step);
    ``prefix`` starts each node's task in the experiment's image (torchrun mode)."""
    if mode == "srun":
        return srun_argv(layout, extra=overrides) + worker_argv(target.python_argv(python), python)
    if not in_step:
        cpus = cpus_per_task * layout.tasks_per_node if cpus_per_task else None
        return srun_argv(layout, tasks_per_node=1, cpus_per_task=cpus) + [*prefix,
            python, "-m", "dethpc.launch.torch_distributed", "--mode", "torchrun",
            *overrides, "--", *target.tokens(),
        ]
    # torchrun of this interpreter (`python -m torch.distributed.run`): a venv's python
    # run by its path, without the venv on PATH, has no `torchrun` to find
    return [
        python, "-m", "torch.distributed.run",
        f"--nnodes={layout.nnodes}",
        f"--nproc-per-node={layout.tasks_per_node}",
        f"--node-rank={node_rank}",
        f"--master-addr={layout.master_addr}",
        f"--master-port={layout.master_port}",
        *overrides,
        "--no-python",
        *worker_argv(target.python_argv(python), python),
    ]


def build_env(
    mode: str, layout: JobLayout, env: Mapping[str, str], *, in_step: bool
) -> dict[str, str]:
    """The environment of the command ``build_argv`` returns."""
    out = {**env, **socket_env(env), "PYTHONUNBUFFERED": "1"}
    if mode == "srun":
        return {**out, **rendezvous_env(layout)}
    if not in_step:  # hand the rendezvous to the nested launcher on every node
        out.update({
            ENV_MASTER_ADDR: layout.master_addr,
            ENV_MASTER_PORT: str(layout.master_port),
            ENV_NPROC_PER_NODE: str(layout.tasks_per_node),
        })
    return out


def plan(
    argv: Sequence[str],
    env: Mapping[str, str],
    which: Callable[[str], str | None] = shutil.which,
    python: str = sys.executable,
) -> LaunchPlan:
    """Decide what to run for ``argv`` in ``env`` (pure apart from ``which``)."""
    args = parse_launcher_args(argv, OPTIONS)
    mode = choose_mode(args, env)
    if not use_slurm(env, which):
        nproc = local_nproc(env, override_value(args.overrides, *NPROC_NAMES))
        layout = local_layout(nproc, env)
        note = f"local launch: {nproc} process(es) on this machine (mode {mode} needs Slurm)"
        return LaunchPlan("workers", workers=local_workers(args.target.python_argv(python),
                                                           layout, env), notes=(note,))
    senv = read_slurm_env(env)
    layout = slurm_layout(senv, env)
    if mode == "srun" and senv.in_step:  # we are one task of the step: be its rank
        return in_step_worker_plan(args.target.python_argv(python), layout, env)
    if mode == "torchrun" and senv.in_step:
        layout = _nested_layout(layout, senv.ntasks, env)
        out_argv = build_argv(mode, args.target, layout, in_step=True, node_rank=senv.nodeid,
                              overrides=args.overrides, python=python)
        return LaunchPlan("exec", tuple(out_argv), build_env(mode, layout, env, in_step=True))
    if mode == "srun":
        return srun_workers_plan(layout, args.target.python_argv(python), env,
                                 extra_srun=args.overrides, python=python)
    prefix, inner = container_of(env)
    out_argv = build_argv(mode, args.target, layout, in_step=False, overrides=args.overrides,
                          cpus_per_task=senv.cpus_per_task, python=inner or python,
                          prefix=prefix)
    return single_plan(out_argv, build_env(mode, layout, env, in_step=False))


def _nested_layout(layout: JobLayout, step_tasks: int, env: Mapping[str, str]) -> JobLayout:
    if step_tasks != layout.nnodes:
        raise LaunchError(
            f"torchrun mode inside a step needs one task per node, got {step_tasks} tasks on "
            f"{layout.nnodes} nodes; run `srun --ntasks-per-node=1` or use --mode srun"
        )
    nproc = env.get(ENV_NPROC_PER_NODE, "")
    per_node = int(nproc) if nproc.isdigit() else 1
    return JobLayout(layout.hosts, per_node, layout.master_addr, layout.master_port, layout.job_id)


def main(argv: Sequence[str] | None = None) -> int:
    return execute(plan(sys.argv[1:] if argv is None else argv, os.environ))


if __name__ == "__main__":
    sys.exit(launcher_main(main))
