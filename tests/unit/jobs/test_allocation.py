"""Table tests for splitting slots into a Slurm allocation shape."""

from __future__ import annotations

import pytest

from dethpc.common.errors import SubmitError
from dethpc.config.model import ResourcePool, SlurmSection
from dethpc.jobs.allocation import Allocation, plan_allocation
from dethpc.jobs.directives import shape_directives

CPU4 = ResourcePool(name="cpu", slots_per_node=4, cpus_per_slot=2)
GPU4 = ResourcePool(name="gpu", slots_per_node=4, gres="gpu", gpu_type="a100")
GPU8 = ResourcePool(name="g8", slots_per_node=8, gres="gpu", mem_per_slot="16G")
NONE = SlurmSection()

CASES = [
    # slots, pool, slurm section, expected allocation, expected directives
    (1, CPU4, NONE, Allocation(1, 1, 0, None, 2),
     [("--nodes", "1"), ("--ntasks-per-node", "1"), ("--cpus-per-task", "2")]),
    (4, CPU4, NONE, Allocation(1, 4, 0, None, 2),
     [("--nodes", "1"), ("--ntasks-per-node", "4"), ("--cpus-per-task", "2")]),
    (8, CPU4, NONE, Allocation(2, 4, 0, None, 2),
     [("--nodes", "2"), ("--ntasks-per-node", "4"), ("--cpus-per-task", "2")]),
    (4, CPU4, SlurmSection(slots_per_node=2), Allocation(2, 2, 0, None, 2),
     [("--nodes", "2"), ("--ntasks-per-node", "2"), ("--cpus-per-task", "2")]),
    (0, GPU4, NONE, Allocation(1, 1, 0, None, 1),
     [("--nodes", "1"), ("--ntasks-per-node", "1"), ("--cpus-per-task", "1")]),
    (2, GPU4, NONE, Allocation(1, 2, 2, "gpu:a100:2", 1, "a100"),
     [("--nodes", "1"), ("--ntasks-per-node", "2"), ("--cpus-per-task", "1"),
      ("--gpus-per-node", "a100:2")]),
    (8, GPU4, SlurmSection(gpu_type="h100"), Allocation(2, 4, 4, "gpu:h100:4", 1, "h100"),
     [("--nodes", "2"), ("--ntasks-per-node", "4"), ("--cpus-per-task", "1"),
      ("--gpus-per-node", "h100:4")]),
    (16, GPU8, NONE, Allocation(2, 8, 8, "gpu:8", 1, None, 8 * 16 * 1024),
     [("--nodes", "2"), ("--ntasks-per-node", "8"), ("--cpus-per-task", "1"),
      ("--gpus-per-node", "8"), ("--mem", "131072M")]),
]


@pytest.mark.parametrize(("slots", "pool", "slurm", "alloc", "directives"), CASES)
def test_plan(slots, pool, slurm, alloc, directives) -> None:
    got = plan_allocation(slots, pool, slurm)
    assert got == alloc
    assert shape_directives(got) == [f"{o}={v}" for o, v in directives]
    assert got.total_tasks == max(slots, 1)


ERRORS = [
    (6, CPU4, NONE, "slots_per_trial=6 does not fill whole nodes of slots_per_node=4; "
     "use a multiple of 4 (e.g. 4 or 8), or set slurm.slots_per_node to 3"),
    (7, CPU4, NONE, "use a multiple of 4 (e.g. 4 or 8), or set slurm.slots_per_node to 1"),
    (-1, CPU4, NONE, "slots_per_trial=-1 is negative"),
    (2, CPU4, SlurmSection(slots_per_node=0), "slots_per_node=0 for pool 'cpu' is not positive"),
    (2, ResourcePool(name="m", mem_per_slot="lots"), NONE, "mem_per_slot='lots' is not a size"),
]


@pytest.mark.parametrize(("slots", "pool", "slurm", "message"), ERRORS)
def test_errors(slots, pool, slurm, message) -> None:
    with pytest.raises(SubmitError) as info:
        plan_allocation(slots, pool, slurm)
    assert message in str(info.value)
