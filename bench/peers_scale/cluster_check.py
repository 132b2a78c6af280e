"""The scale cluster every cell starts on: all nodes idle, nothing allocated (issue 48).

Why: issue 48's full table (8ebadc2) counted one fault "refused" that no system caused.
At one cell's end the harness's ``scancel`` killed a job the same instant slurmctld
launched it on g4 (``error: gres/gpu: job 4318 dealloc of node g4 bad node_offset 0 count
is 0`` in slurmctld.log, Slurm 22.05.8). From then on g4 ran nothing for 13 minutes and
7 cells. Nothing else was queued for it, yet its preemptor in the next fault cell stayed
PENDING (Resources) until the fault schedule's own slurmctld restart rebuilt the node's
allocations. The cell before it and the 6 plain cells ran on 60 GPUs, not 64, and
nothing said so.

Owns: ``parse_nodes`` (``scontrol show node -o``), ``unclean`` (which nodes are not
IDLE with nothing allocated), and ``settle``. ``settle`` runs before a cell. It waits
out what clears itself, such as a node still COMPLETING a cancelled job. What is left
unclean with the queue empty it repairs: ``scontrol update state=resume`` for a node DOWN
or drained, then, for what is still unclean (a leaked allocation), a slurmctld restart,
the one repair measured to clear g4's. Then it records the cluster the cell started on.
Must not: run while a system's or the background's jobs are queued (the caller clears the
queue first), or hide a node it could not repair (the cell's record lists it).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dethpc.surfaces.admin.facts import parse_records


@dataclass(frozen=True)
class NodeUse:
    """One node's state and what slurmctld counts as allocated on it."""

    name: str
    state: str           # e.g. IDLE, MIXED, IDLE+COMPLETING, DOWN+NOT_RESPONDING
    cpu_alloc: int
    alloc_tres: str      # empty when nothing is allocated

    @property
    def clean(self) -> bool:
        return self.state == "IDLE" and self.cpu_alloc == 0 and not self.alloc_tres

    @property
    def down_or_drained(self) -> bool:
        flags = set(self.state.split("+"))
        return bool(flags & {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL"})

    def as_json(self) -> dict[str, Any]:
        return {"node": self.name, "state": self.state, "cpu_alloc": self.cpu_alloc,
                "alloc_tres": self.alloc_tres}


def parse_nodes(text: str) -> list[NodeUse]:
    """Each line of ``scontrol show node -o`` that names a node (read by dethpc's own
    ``scontrol -o`` record parser, ``admin.facts.parse_records``)."""
    out = []
    for f in parse_records(text):
        if "NodeName" not in f:
            continue
        try:
            cpus = int(f.get("CPUAlloc", "0"))
        except ValueError:
            cpus = -1        # unreadable: not clean
        out.append(NodeUse(f["NodeName"], f.get("State", "?"), cpus, f.get("AllocTRES", "")))
    return out


def unclean(nodes: Sequence[NodeUse]) -> list[NodeUse]:
    """The nodes a cell must not start on as they are: not IDLE, or with anything
    allocated (with the queue empty, that is an allocation slurmctld leaked)."""
    return [n for n in nodes if not n.clean]


#: how long ``settle`` waits for what clears itself (COMPLETING epilogs, a revived
#: node's registration) before it repairs, and again after each repair
SETTLE_S = 30.0


def settle(show_nodes: Callable[[], str], restart_ctld: Callable[[], Any],
           resume: Callable[[str], Any], *, wait_s: float = SETTLE_S,
           poll_s: float = 1.0) -> dict[str, Any]:
    """Bring the cluster to every node clean and say what that took: ``unclean`` (what
    was still unclean after ``wait_s``, before any repair; empty when the cluster was
    clean), ``repairs`` (in order), ``left`` (what no repair cleared: the cell starts
    with it, said) and ``took_s``."""
    began = time.monotonic()

    def wait() -> list[NodeUse]:
        deadline = time.monotonic() + wait_s
        while True:
            bad = unclean(parse_nodes(show_nodes()))
            if not bad or time.monotonic() >= deadline:
                return bad
            time.sleep(poll_s)

    first = bad = wait()
    repairs: list[str] = []
    stuck = [n.name for n in bad if n.down_or_drained]
    if stuck:
        for name in stuck:
            resume(name)
        repairs.append(f"resume {','.join(stuck)}")
        bad = wait()
    if bad:
        restart_ctld()
        repairs.append("slurmctld restart")
        bad = wait()
    return {"unclean": [n.as_json() for n in first], "repairs": repairs,
            "left": [n.as_json() for n in bad], "took_s": round(time.monotonic() - began, 1)}


def settle_scale_cluster(env: dict[str, str], cluster: Any) -> dict[str, Any]:
    """``settle`` on the scale cluster (``cluster``: its ``DevCluster``), as root."""
    from dethpc.devcluster.faults import ClusterFaults

    def show() -> str:
        return subprocess.run(["scontrol", "show", "node", "-o"], capture_output=True,
                              text=True, env=env, check=False, timeout=60).stdout

    def resume(node: str) -> None:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                       capture_output=True, text=True, env=env, check=False, timeout=60)

    return settle(show, lambda: ClusterFaults(cluster, timeout=120.0).restart_slurmctld(),
                  resume)
