"""Is one dev cluster up? Its daemons, munge, the controller and the nodes.

Owns: ``ClusterStatus`` and ``DaemonState`` (what ``status`` reports), ``Readiness``
(read-only checks through the cluster's runner: munge answers, ``scontrol ping``, node
states from sinfo, when each slurmd registered, the whole status) and the wait ``up``
does on them (``wait_nodes``: every node usable and every slurmd started in this run
registered, DOWN/DRAINED nodes resumed), plus ``wait_until``, ``try_output``,
``port_open`` and ``munged_pid``, the polling and quiet-command helpers the other parts share.
Must not: start or stop daemons, or write files.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dethpc.devcluster.procs as procs
from dethpc.common.errors import CommandError, DethpcError
from dethpc.common.runner import CommandRunner
from dethpc.devcluster.layout import DevClusterLayout

USABLE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
RESUMABLE_STATES = frozenset({"down", "drained", "draining", "fail", "failing"})
MUNGE_RUN = Path("/run/munge")


@dataclass(frozen=True)
class DaemonState:
    name: str
    pid: int | None
    ours: bool

    @property
    def running(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True)
class ClusterStatus:
    daemons: list[DaemonState]
    munge_ok: bool
    controller_up: bool
    nodes: dict[str, str]
    sinfo: str
    expected_nodes: int

    @property
    def usable_nodes(self) -> list[str]:
        return sorted(n for n, s in self.nodes.items() if s in USABLE_STATES)

    @property
    def ready(self) -> bool:
        # sinfo keeps saying idle for a while after a slurmd died: check the daemons too.
        daemons = all(d.running for d in self.daemons if d.name != "munged")
        return (self.munge_ok and self.controller_up and daemons
                and len(self.usable_nodes) >= self.expected_nodes)


def try_output(runner: CommandRunner, argv: list[str], timeout: float) -> str | None:
    """``argv``'s stdout when it ran and exited 0, else None (never raises)."""
    try:
        res = runner.run(argv, check=False, retry=False, timeout=timeout)
    except CommandError:
        return None
    return res.stdout if res.returncode == 0 else None


def wait_until(what: str, ok: Callable[[], bool], timeout: float, log: Path | None = None,
               died: Callable[[], bool] | None = None) -> None:
    """Poll ``ok`` until true; else a ``DethpcError`` with the last lines of ``log``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():
            return
        if died is not None and died():
            what += " (the process exited)"
            break
        time.sleep(0.2)
    tail = ""
    if log is not None and log.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise DethpcError(
        f"gave up after {timeout:.0f}s waiting for {what}."
        + (f" Last lines of {log}:\n{tail}" if tail else f" See {log}." if log else "")
    )


def port_open(port: int) -> bool:
    """Something listens on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def munged_pid(layout: DevClusterLayout) -> tuple[int | None, bool]:
    """(pid of the running munged, whether a dev cluster started it)."""
    ours = procs.running_pid(layout.pid_file("munged"), "munged")
    if ours:
        return ours, True
    return procs.running_pid(MUNGE_RUN / "munged.pid", "munged"), False


class Readiness:
    """Read-only checks of the cluster ``layout`` describes, through ``runner`` (whose
    environment names that cluster's ``SLURM_CONF``)."""

    def __init__(self, layout: DevClusterLayout, runner: CommandRunner) -> None:
        self.layout, self.runner = layout, runner

    def munge_ok(self) -> bool:
        """munged answers ``munge -n | unmunge`` (False when munge is not even installed:
        the runner's CommandError for a command that cannot be started)."""
        try:
            cred = self.runner.run(["munge", "-n"], check=False, retry=False, timeout=10)
            if cred.returncode != 0:
                return False
            back = self.runner.run(["unmunge"], input=cred.stdout, check=False, retry=False,
                                   timeout=10)
        except CommandError:
            return False
        return back.returncode == 0

    def controller_up(self) -> bool:
        if not self.layout.slurm_conf.exists():
            return False
        res = try_output(self.runner, ["scontrol", "ping"], timeout=10)
        return res is not None and "is UP" in res

    def node_states(self) -> dict[str, str]:
        """``{node: state}`` from sinfo (``idle``, ``down*``, ``drained`` ...)."""
        out = try_output(self.runner, ["sinfo", "-h", "-N", "-o", "%N|%T"], timeout=15)
        states: dict[str, str] = {}
        for line in (out or "").splitlines():
            name, _, state = line.strip().partition("|")
            if name:
                states[name] = state.strip().lower()
        return states

    def status(self) -> ClusterStatus:
        lay = self.layout
        daemons = [DaemonState("munged", *munged_pid(lay))]
        for name in ("mariadbd", "slurmdbd", "slurmctld"):
            daemons.append(DaemonState(name, procs.running_pid(lay.pid_file(name), name), True))
        for node in lay.nodes:
            pid = procs.running_pid(lay.pid_file("slurmd", node.name), "slurmd")
            daemons.append(DaemonState(f"slurmd {node.name}", pid, True))
        ctld = self.controller_up()
        sinfo = try_output(self.runner, ["sinfo"], timeout=15) if ctld else None
        return ClusterStatus(daemons=daemons, munge_ok=self.munge_ok(), controller_up=ctld,
                             nodes=self.node_states() if ctld else {}, sinfo=sinfo or "",
                             expected_nodes=lay.node_count)

    def registered_since(self) -> dict[str, float]:
        """``{node: SlurmdStartTime}`` as the controller knows it (epoch seconds)."""
        out = try_output(self.runner, ["scontrol", "-o", "show", "node"], timeout=15) or ""
        seen: dict[str, float] = {}
        for line in out.splitlines():
            fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
            try:
                seen[fields["NodeName"]] = time.mktime(
                    time.strptime(fields["SlurmdStartTime"], "%Y-%m-%dT%H:%M:%S"))
            except (KeyError, ValueError):
                continue
        return seen

    def wait_nodes(self, timeout: float, started: dict[str, float]) -> None:
        """Until every node is usable and each slurmd of ``started`` (node -> start time)
        has registered; nodes left DOWN/DRAINED are resumed on the way."""
        deadline = time.monotonic() + timeout
        last_resume = 0.0
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.node_states()
            usable = [n for n, s in states.items() if s in USABLE_STATES]
            if started and len(usable) >= self.layout.node_count:
                # A node restored from saved state reads idle before its new slurmd
                # registers: wait until the controller has seen every slurmd we started.
                seen = self.registered_since()
                usable = [n for n in usable
                          if seen.get(n, 0.0) >= int(started.get(n, 0.0)) - 1]
            if len(usable) >= self.layout.node_count:
                return
            stuck = sorted(n for n, s in states.items() if s in RESUMABLE_STATES)
            if stuck and time.monotonic() - last_resume > 3:
                self.runner.run(["scontrol", "update", f"nodename={','.join(stuck)}",
                                 "state=resume"], check=False, retry=False)
                last_resume = time.monotonic()
            time.sleep(0.3)
        raise DethpcError(
            f"the dev cluster's nodes did not become usable within {timeout:.0f}s "
            f"(sinfo says {states or 'nothing'}). See {self.layout.log_dir}/slurmd.*.log "
            "and slurmctld.log."
        )
