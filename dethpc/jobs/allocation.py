"""The shape of one trial's Slurm allocation: slots -> nodes x tasks x GPUs.

Owns: ``plan_allocation`` (a pure function from ``resources.slots_per_trial``,
the resource pool and the experiment's ``slurm:`` section to an ``Allocation``;
``dethpc.jobs.directives.shape_directives`` turns it into directives).
One slot is one training process (one Slurm task); on a GPU pool one slot is
also one GPU.
Must not: emit directives (``dethpc.jobs.directives`` owns every one), run commands,
or read the environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dethpc.common.errors import SubmitError
from dethpc.config.model import ResourcePool, SlurmSection

_SIZE = re.compile(r"^(\d+)([KMGT]?)B?$", re.IGNORECASE)
_MIB_PER_UNIT = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "": 1}


@dataclass(frozen=True)
class Allocation:
    """What one trial asks Slurm for. ``gpus_per_node`` is 0 on a CPU pool."""

    nodes: int
    ntasks_per_node: int
    gpus_per_node: int
    #: ``--gres`` form of the GPU request ("gpu:a100:4", "gpu:4"); None on a CPU pool
    gres: str | None
    cpus_per_task: int
    gpu_type: str | None = None
    #: memory per node in MiB (pool.mem_per_slot x tasks per node); None = Slurm default
    mem_per_node_mb: int | None = None

    @property
    def total_tasks(self) -> int:
        return self.nodes * self.ntasks_per_node


def plan_allocation(slots_per_trial: int, pool: ResourcePool, slurm: SlurmSection) -> Allocation:
    """Split ``slots_per_trial`` into whole nodes of ``slots_per_node``.

    ``slurm.slots_per_node`` (experiment) overrides ``pool.slots_per_node``
    (cluster); ``slurm.gpu_type`` overrides ``pool.gpu_type``. A trial that fits
    in one node gets one node with exactly its slots; a larger one must fill
    whole nodes, else ``SubmitError`` names the fix. ``slots_per_trial=0`` (a
    Determined CPU-only trial) is one task without GPUs.
    """
    per_node = slurm.slots_per_node if slurm.slots_per_node is not None else pool.slots_per_node
    _check_positive(per_node, "slots_per_node", pool)
    if slots_per_trial < 0:
        raise SubmitError(
            f"resources.slots_per_trial={slots_per_trial} is negative; use 0 (CPU only) or more"
        )
    is_gpu = _is_gpu_pool(pool) and slots_per_trial > 0
    nodes, tasks = _split(max(slots_per_trial, 1), per_node)
    gpu_type = (slurm.gpu_type or pool.gpu_type) if is_gpu else None
    return Allocation(
        nodes=nodes,
        ntasks_per_node=tasks,
        gpus_per_node=tasks if is_gpu else 0,
        gres=_gres(tasks, gpu_type) if is_gpu else None,
        cpus_per_task=max(pool.cpus_per_slot, 1),
        gpu_type=gpu_type,
        mem_per_node_mb=mem_per_node_mb(pool, tasks),
    )


def _split(slots: int, per_node: int) -> tuple[int, int]:
    if slots <= per_node:
        return 1, slots
    if slots % per_node:
        lower = slots // per_node * per_node
        divisors = [d for d in range(per_node - 1, 0, -1) if slots % d == 0]
        hint = f"set slurm.slots_per_node to {divisors[0]}" if divisors else ""
        raise SubmitError(
            f"resources.slots_per_trial={slots} does not fill whole nodes of "
            f"slots_per_node={per_node}; use a multiple of {per_node} "
            f"(e.g. {lower} or {lower + per_node}), or {hint or 'fewer slots per node'} "
            f"so that every node runs the same number of processes"
        )
    return slots // per_node, per_node


def _is_gpu_pool(pool: ResourcePool) -> bool:
    return pool.gres is not None and pool.gres.split(":", 1)[0] == "gpu"


def _gres(gpus: int, gpu_type: str | None) -> str:
    return f"gpu:{gpu_type}:{gpus}" if gpu_type else f"gpu:{gpus}"


def mem_per_node_mb(pool: ResourcePool, tasks: int) -> int | None:
    """``--mem`` in MiB for ``tasks`` slots on one node (``mem_per_slot`` x tasks)."""
    if pool.mem_per_slot is None:
        return None
    match = _SIZE.match(pool.mem_per_slot.strip())
    if match is None:
        raise SubmitError(
            f"pool {pool.name!r}: mem_per_slot={pool.mem_per_slot!r} is not a size; "
            f"use a number with an optional K/M/G/T suffix, e.g. '4G'"
        )
    mib = int(match.group(1)) * _MIB_PER_UNIT[match.group(2).upper()]
    return max(int(mib * tasks), 1)


def _check_positive(value: int, name: str, pool: ResourcePool) -> None:
    if value < 1:
        raise SubmitError(
            f"{name}={value} for pool {pool.name!r} is not positive; set it to the number "
            f"of slots (GPUs or CPU tasks) one node offers"
        )
