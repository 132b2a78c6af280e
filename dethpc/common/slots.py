"""What Slurm's environment says about a trial's slots, in Determined's terms.

Owns: the pure readers behind ``ClusterInfo.slot_ids``, ``container_slot_counts`` and
``gpu_uuids`` and the ``DET_SLOT_IDS``/``DET_AGENT_ID``/... variables
(``dethpc.launch.detenv``): one slot is one Slurm task (and one GPU on a GPU pool,
``dethpc.jobs.allocation``); Determined's "container" is one node of the job, its
"agent" the node's name.
Must not: run commands (``nvidia-smi`` is ``dethpc.core._info``'s), or read anything but
the mapping it is given.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping

_REPEAT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def tasks_per_node(spec: str) -> list[int]:
    """``SLURM_TASKS_PER_NODE`` (``"2(x3),1"``) as one count per node (``[2, 2, 2, 1]``);
    ``[]`` when the text is not in that form."""
    out: list[int] = []
    for part in spec.split(","):
        match = _REPEAT.match(part.strip())
        if match is None:
            return []
        out += [int(match.group(1))] * int(match.group(2) or 1)
    return out


def _ids(raw: str) -> list[str]:
    return [x.strip() for x in raw.split(",") if x.strip()]


def gpu_devices(env: Mapping[str, str]) -> list[str]:
    """This node's GPUs as Slurm or CUDA name them: ``SLURM_STEP_GPUS`` (a task of a
    step), ``SLURM_JOB_GPUS`` (the batch shell), else ``CUDA_VISIBLE_DEVICES`` /
    ``ROCR_VISIBLE_DEVICES`` (indices or ``GPU-``/``MIG-`` UUIDs); ``[]`` without GPUs."""
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES",
                 "ROCR_VISIBLE_DEVICES"):
        found = _ids(env.get(name, ""))
        if found and found != ["NoDevFiles"]:
            return found
    return []


def slot_counts(env: Mapping[str, str]) -> list[int]:
    """Slots of each node of the job, first node first (Determined's
    ``container_slot_counts``): ``SLURM_TASKS_PER_NODE``, else the local slot count once."""
    counts = tasks_per_node(env.get("SLURM_TASKS_PER_NODE", ""))
    return counts or [local_slots(env)]


def node_index(env: Mapping[str, str]) -> int:
    """This node's index in the job (``SLURM_NODEID``; 0 when unset)."""
    raw = env.get("SLURM_NODEID", "").strip()
    return int(raw) if raw.isdigit() else 0


def local_slots(env: Mapping[str, str]) -> int:
    """Slots on this node: its GPUs, else its entry of ``SLURM_TASKS_PER_NODE``, else
    ``LOCAL_WORLD_SIZE``, else 1."""
    gpus = gpu_devices(env)
    if gpus:
        return len(gpus)
    counts = tasks_per_node(env.get("SLURM_TASKS_PER_NODE", ""))
    index = node_index(env)
    if counts and index < len(counts):
        return counts[index]
    raw = env.get("LOCAL_WORLD_SIZE", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def slot_ids(env: Mapping[str, str]) -> list[int]:
    """This node's slot ids (Determined's ``slot_ids``): the GPU indices (positions when
    the devices are named by UUID), else ``0..n-1`` for the node's CPU slots (Determined's
    own Slurm launcher gives ``[0]`` to a CPU task)."""
    gpus = gpu_devices(env)
    if gpus and all(g.isdigit() for g in gpus):
        return [int(g) for g in gpus]
    return list(range(len(gpus) if gpus else local_slots(env)))


def gpu_uuids(env: Mapping[str, str]) -> list[str] | None:
    """The GPUs' UUIDs when the environment names them (``GPU-...``/``MIG-...``), ``[]``
    without GPUs, None when only indices are known (ask ``nvidia-smi``)."""
    gpus = gpu_devices(env)
    if not gpus:
        return []
    if all(g.startswith(("GPU-", "MIG-")) for g in gpus):
        return gpus
    return None


def agent_id(env: Mapping[str, str]) -> str:
    """The node's name (Determined's agent; its Slurm launcher uses the hostname):
    ``SLURMD_NODENAME``, else this host's name."""
    return env.get("SLURMD_NODENAME") or socket.gethostname()
