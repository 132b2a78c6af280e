"""bench/peers_scale/cluster_check: a cell starts on a cluster whose every node is IDLE
with nothing allocated. The lines are real ``scontrol show node -o`` output of the scale
cluster (Slurm 22.05.8): idle, a GPU job running (MIXED), DOWN, and IDLE+DRAIN. A node
that shows an allocation with the queue empty (slurmctld's leaked GPUs: issue 48's
refused preemption) is repaired by a slurmctld restart; a node DOWN or drained is
resumed first (no restart when that clears it), and what no repair cleared is left in
the record, not hidden."""

from __future__ import annotations

from typing import Any

import pytest

from bench.peers_scale.cluster_check import NodeUse, parse_nodes, settle, unclean

TAIL = ("ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
        "Partitions=debug,low,high  BootTime=2026-12-03T05:40:54 "
        "SlurmdStartTime=2026-12-03T12:38:53 LastBusyTime=2026-12-03T12:38:53 "
        "CfgTRES=cpu=16,mem=16000M,billing=16,gres/gpu=4")


def line(name: str, state: str, cpus: int = 0, tres: str = "", reason: str = "") -> str:
    return (f"NodeName={name} Arch=x86_64 CoresPerSocket=1  CPUAlloc={cpus} CPUEfctv=16 "
            f"CPUTot=16 CPULoad=4.75 AvailableFeatures=(null) ActiveFeatures=(null) "
            f"Gres=gpu:a100:4 NodeAddr=127.0.0.1 NodeHostName=vm Port=7204 "
            f"Version=22.05.8 OS=Linux 6.18.44-fc-v1098 #1 SMP PREEMPT_DYNAMIC @0  "
            f"RealMemory=16000 AllocMem=0 FreeMem=17337 Sockets=16 Boards=1 State={state} "
            f"{TAIL} AllocTRES={tres} CapWatts=n/a CurrentWatts=0 AveWatts=0 "
            f"ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s{reason}")


IDLE = line("g4", "IDLE")
MIXED = line("g5", "MIXED", 1, "cpu=1,mem=1000M,gres/gpu=2")
DOWN = line("g15", "DOWN", reason=" Reason=test48 [root@2026-12-03T12:39:45]")
DRAIN = line("g16", "IDLE+DRAIN", reason=" Reason=test48 [root@2026-12-03T12:39:45]")
LEAKED = line("g4", "IDLE", 0, "gres/gpu=4")


@pytest.mark.parametrize(("text", "want"), [
    (IDLE, [NodeUse("g4", "IDLE", 0, "")]),
    (MIXED, [NodeUse("g5", "MIXED", 1, "cpu=1,mem=1000M,gres/gpu=2")]),
    (DOWN, [NodeUse("g15", "DOWN", 0, "")]),
    (DRAIN, [NodeUse("g16", "IDLE+DRAIN", 0, "")]),
    (f"{IDLE}\n\n{MIXED}\n", [NodeUse("g4", "IDLE", 0, ""),
                              NodeUse("g5", "MIXED", 1, "cpu=1,mem=1000M,gres/gpu=2")]),
    ("", []),
    ("No nodes in the system", []),
])
def test_parse_nodes(text: str, want: list[NodeUse]) -> None:
    assert parse_nodes(text) == want


@pytest.mark.parametrize(("text", "bad"), [
    (IDLE, []),
    (MIXED, ["g5"]),                 # a job holds it
    (DOWN, ["g15"]),
    (DRAIN, ["g16"]),
    (LEAKED, ["g4"]),                # GPUs counted allocated, no CPU, no job
    (line("g2", "IDLE+COMPLETING"), ["g2"]),
    (line("g3", "IDLE", cpus=-0, tres=""), []),
])
def test_unclean(text: str, bad: list[str]) -> None:
    assert [n.name for n in unclean(parse_nodes(text))] == bad


@pytest.mark.parametrize(("node", "down"), [
    (NodeUse("g1", "DOWN", 0, ""), True),
    (NodeUse("g1", "DOWN+NOT_RESPONDING", 0, ""), True),
    (NodeUse("g1", "IDLE+DRAIN", 0, ""), True),
    (NodeUse("g1", "MIXED+DRAIN", 1, "cpu=1"), True),
    (NodeUse("g1", "IDLE", 0, "gres/gpu=4"), False),
    (NodeUse("g1", "IDLE+COMPLETING", 0, ""), False),
])
def test_down_or_drained(node: NodeUse, down: bool) -> None:
    assert node.down_or_drained is down


class Cluster:
    """What ``settle`` calls, scripted: the node listing each call returns, and the
    repairs it was asked for."""

    def __init__(self, *listings: str) -> None:
        self.listings = list(listings)
        self.calls: list[str] = []

    def show(self) -> str:
        return self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]

    def restart(self) -> Any:
        self.calls.append("restart")

    def resume(self, node: str) -> Any:
        self.calls.append(f"resume {node}")


def run(c: Cluster) -> dict[str, Any]:
    return settle(c.show, c.restart, c.resume, wait_s=0.0, poll_s=0.0)


def test_a_clean_cluster_is_left_alone() -> None:
    c = Cluster(f"{IDLE}\n{line('g5', 'IDLE')}")
    out = run(c)
    assert c.calls == [] and out["unclean"] == [] and out["repairs"] == [] \
        and out["left"] == []


def test_what_clears_itself_within_the_wait_needs_no_repair() -> None:
    c = Cluster(line("g2", "IDLE+COMPLETING"), line("g2", "IDLE"))
    out = settle(c.show, c.restart, c.resume, wait_s=5.0, poll_s=0.0)
    assert c.calls == [] and out["unclean"] == []


def test_a_leaked_allocation_is_repaired_by_a_slurmctld_restart() -> None:
    c = Cluster(LEAKED, IDLE)
    out = run(c)
    assert c.calls == ["restart"]
    assert out["unclean"] == [{"node": "g4", "state": "IDLE", "cpu_alloc": 0,
                               "alloc_tres": "gres/gpu=4"}]
    assert out["repairs"] == ["slurmctld restart"] and out["left"] == []


def test_a_down_node_is_resumed_without_a_restart() -> None:
    c = Cluster(f"{DOWN}\n{DRAIN}", f"{line('g15', 'IDLE')}\n{line('g16', 'IDLE')}")
    out = run(c)
    assert c.calls == ["resume g15", "resume g16"]
    assert out["repairs"] == ["resume g15,g16"] and out["left"] == []


def test_a_node_still_unclean_after_its_resume_gets_the_restart() -> None:
    c = Cluster(DOWN, LEAKED, IDLE)
    out = run(c)
    assert c.calls == ["resume g15", "restart"]
    assert out["repairs"] == ["resume g15", "slurmctld restart"] and out["left"] == []


def test_what_no_repair_clears_is_left_in_the_record() -> None:
    c = Cluster(LEAKED)
    out = run(c)
    assert c.calls == ["restart"]            # not DOWN or drained: nothing to resume
    assert [n["node"] for n in out["left"]] == ["g4"]
