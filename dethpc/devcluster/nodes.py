"""Crash one node of the dev cluster and bring it back, for tests of node failure.

Owns: ``crash_node`` -- what a node crash does, in the order it happens on a real
site: every process of the node (its slurmd, each slurmstepd of it and all they
started) dies at once by SIGKILL, then the node is marked DOWN, which Slurm does
itself after ``SlurmdTimeout`` (or a site's health check does at once);
slurmctld then ends the node's jobs ``NODE_FAIL`` and requeues those that may be
requeued. ``revive_node`` -- the node's slurmd started again the way ``up``
starts it (owner marker in its environment), the node RESUMEd, and a wait until
the controller has the new slurmd registered and the node usable.
Must not: change slurm.conf (a crash test must not depend on timeouts tuned for
it: ``SlurmdTimeout`` below 30 s starves on two loaded cores), or touch any node
other than the one it is given.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from dethpc.common.errors import DethpcError
from dethpc.devcluster import procs
from dethpc.devcluster.cluster import RESUMABLE_STATES, USABLE_STATES, DevCluster
from dethpc.devcluster.pinning import DaemonRole


@dataclass(frozen=True)
class Crash:
    """What ``crash_node`` did: the node, and the processes it killed (``{pid: comm}``)."""

    node: str
    killed: dict[int, str]


def node_processes(cluster: DevCluster, node: str) -> dict[int, str]:
    """``{pid: comm}`` of everything running "on" ``node``: its slurmd, and each
    slurmstepd of it with everything that slurmstepd started. A slurmstepd is the
    node's when it holds the node's slurmd log open (slurmd hands it down; the
    fake nodes share one host, so nothing else tells them apart). Any other process
    whose environment says it was started on the node (``SLURMD_NODENAME``, which a
    job's processes inherit) is the node's too, with what it started: CI once saw a
    job's ``srun`` outlive a crash and, after the requeue, SIGKILL the new run's step
    of the same id."""
    lay = cluster.layout
    log = str(lay.log_dir / f"slurmd.{node}.log")
    roots = [pid for pid in _pids()
             if (procs.comm(pid) == "slurmstepd" and _holds(pid, log))
             or _started_on(pid, node)]
    slurmd = procs.running_pid(lay.pid_file("slurmd", node), "slurmd")
    found = _subtrees(roots)
    if slurmd is not None:
        found[slurmd] = "slurmd"
    return found


def crash_node(cluster: DevCluster, node: str, reason: str = "dev cluster: node crash") -> Crash:
    """Kill every process of ``node`` at once, then mark it DOWN (see the module doc).

    The processes are frozen (SIGSTOP) before any is killed, so none of them sees
    another one die: a batch shell that saw its training step die would write an
    exit record, which a real crash never leaves.
    """
    _check_node(cluster, node)
    killed: dict[int, str] = {}
    for _ in range(5):                       # until nothing of the node is left
        frozen = _freeze(cluster, node, killed)
        if not frozen:
            break
        for pid in frozen:
            _signal(pid, signal.SIGKILL)
        left = procs.wait_gone(list(frozen), frozen, timeout=30.0)
        if left:
            raise DethpcError(f"crash of {node}: processes {left} survived SIGKILL for 30 s")
        killed.update(frozen)
    else:
        raise DethpcError(f"crash of {node}: its processes kept coming back after 5 rounds "
                          f"of SIGKILL")
    cluster.runner.run(["scontrol", "update", f"NodeName={node}", "State=DOWN",
                        f"Reason={reason}"], retry=False, timeout=30)
    return Crash(node=node, killed=killed)


def _freeze(cluster: DevCluster, node: str, done: dict[int, str]) -> dict[int, str]:
    """SIGSTOP every process of ``node`` not in ``done``, until no new one forked past
    the freeze; return them."""
    frozen: dict[int, str] = {}
    for _ in range(20):
        new = {p: c for p, c in node_processes(cluster, node).items()
               if p not in frozen and p not in done}
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        frozen.update(new)
    return frozen


def revive_node(cluster: DevCluster, node: str, timeout: float = 180.0) -> None:
    """Start ``node``'s slurmd if it is not running, RESUME the node and wait until the
    controller has that slurmd registered and the node takes jobs."""
    _check_node(cluster, node)
    lay = cluster.layout
    started = 0.0
    if procs.running_pid(lay.pid_file("slurmd", node), "slurmd") is None:
        started = time.time()
        # as `up` starts it: on the node CPUs the layout pins (none by default)
        cluster.daemon_runner.run(lay.pinning.argv(DaemonRole.NODE, ["slurmd", "-N", node]),
                                  retry=False)
    deadline = time.monotonic() + timeout
    last_resume = 0.0
    state, registered = "", 0.0
    while time.monotonic() < deadline:
        registered = _slurmd_start_time(cluster, node)   # first: the state read after it
        state = cluster.node_states().get(node, "")      # is as new as the registration
        # SlurmdStartTime has whole seconds: the new slurmd registered when it is not
        # older than our start (the controller keeps the old one's until then)
        fresh = registered >= int(started) - 1
        if fresh and state in USABLE_STATES:
            return
        # RESUME once the new slurmd registered (before, the node only goes to IDLE*;
        # with ReturnToService=2 registration alone returns a DOWN node to service)
        if fresh and state.rstrip("*~#$@^-!%") in RESUMABLE_STATES \
                and time.monotonic() - last_resume > 3:
            cluster.runner.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                               check=False, retry=False, timeout=30)
            last_resume = time.monotonic()
        time.sleep(0.5)
    raise DethpcError(
        f"node {node} did not come back within {timeout:.0f}s (state {state or 'unknown'}, "
        f"slurmd registered at {registered:.0f}, started at {started:.0f}). "
        f"See {lay.log_dir}/slurmd.{node}.log and slurmctld.log.")


# ------------------------------------------------------------------ helpers
def _check_node(cluster: DevCluster, node: str) -> None:
    names = [n.name for n in cluster.layout.nodes]
    if node not in names:
        raise DethpcError(f"no node {node!r} in the dev cluster; allowed: {', '.join(names)}")


def _slurmd_start_time(cluster: DevCluster, node: str) -> float:
    res = cluster.runner.run(["scontrol", "-o", "show", "node", node], check=False,
                             retry=False, timeout=15)
    fields = dict(w.split("=", 1) for w in res.stdout.split() if "=" in w)
    try:
        return time.mktime(time.strptime(fields["SlurmdStartTime"], "%Y-%m-%dT%H:%M:%S"))
    except (KeyError, ValueError):
        return 0.0


def _pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


def _started_on(pid: int, node: str) -> bool:
    """True when ``pid``'s environment has ``SLURMD_NODENAME=<node>``."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"SLURMD_NODENAME={node}".encode() in env.split(b"\0")


def _holds(pid: int, path: str) -> bool:
    """True when ``pid`` has ``path`` open."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) == path:
                return True
        except OSError:
            continue
    return False


def _subtrees(roots: list[int]) -> dict[int, str]:
    children: dict[int, list[int]] = {}
    for pid in _pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat.rsplit(")", 1)[-1].split()[1]), []).append(pid)
    found: dict[int, str] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        name = procs.comm(pid)
        if name is None or pid in found:
            continue
        found[pid] = name
        todo.extend(children.get(pid, []))
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
