"""The Slurm daemons of one dev cluster: its slurmdbd, slurmctld and slurmd "nodes".

Owns: ``SlurmDaemons`` -- starting each daemon that is not running (through the
cluster's daemon runner, whose environment carries the cluster's ``SLURM_CONF`` and
its owner marker), restarting those whose config changed, and stopping them for
``down``: running jobs requeued first (else cancelled), ``scontrol shutdown``, SIGKILL
for a slurmd that hangs, slurmdbd, then leftovers (slurmstepd holding files in this
cluster's state directory, their tasks, anything with this cluster's marker). Each
daemon starts under the layout's ``CpuPinning`` (``taskset``; none by default), and
``pinning_differs`` tells ``up`` when a running daemon sits on other CPUs than asked.
Must not: touch another cluster's daemons or the shared ones (munged, MariaDB:
``shared``), or kill a process it cannot tell is this cluster's (pid files are
checked against the program's name).
"""

from __future__ import annotations

import time

import dethpc.devcluster.procs as procs
from dethpc.common.runner import CommandRunner
from dethpc.devcluster.layout import OWNER_ENV, DevClusterLayout
from dethpc.devcluster.pinning import DaemonRole
from dethpc.devcluster.readiness import Readiness, port_open, try_output, wait_until


class SlurmDaemons:
    """slurmdbd, slurmctld and the slurmd of ``layout``'s cluster."""

    def __init__(self, layout: DevClusterLayout, runner: CommandRunner,
                 daemon_runner: CommandRunner) -> None:
        self.layout, self.runner, self.daemon_runner = layout, runner, daemon_runner
        self.readiness = Readiness(layout, runner)

    def ensure_slurmdbd(self, restart: bool) -> None:
        pid_file = self.layout.pid_file("slurmdbd")
        pid = procs.running_pid(pid_file, "slurmdbd")
        if pid and restart:
            procs.stop(pid, "slurmdbd", timeout=15)
            pid = None
        if not pid:
            self.daemon_runner.run(self.layout.pinning.argv(DaemonRole.LOGIN, ["slurmdbd"]))
        wait_until("slurmdbd to listen", lambda: port_open(self.layout.dbd_port), 60,
                   log=self.layout.log_dir / "slurmdbd.log")

    def ensure_slurm(self, restart: bool) -> dict[str, float]:
        """slurmctld and every slurmd running (restarted when ``restart``); returns
        ``{node: time}`` of the slurmd started now (``Readiness.wait_nodes`` waits for
        them to register)."""
        lay = self.layout
        if restart:
            self.stop_slurm()
        elif self.ctld_on_other_config():  # left by a fault test (devcluster.faults)
            ctld = procs.running_pid(lay.pid_file("slurmctld"), "slurmctld")
            if ctld:
                procs.stop(ctld, "slurmctld", timeout=20)
        if not procs.running_pid(lay.pid_file("slurmctld"), "slurmctld"):
            self.daemon_runner.run(lay.pinning.argv(DaemonRole.LOGIN, ["slurmctld"]))
        wait_until("slurmctld to answer `scontrol ping`", self.readiness.controller_up, 60,
                   log=lay.log_dir / "slurmctld.log")
        started: dict[str, float] = {}
        for node in lay.nodes:
            if not procs.running_pid(lay.pid_file("slurmd", node.name), "slurmd"):
                started[node.name] = time.time()
                self.daemon_runner.run(self.slurmd_argv(node.name))
        return started

    def slurmd_argv(self, node: str) -> list[str]:
        """How ``node``'s slurmd is started (pinned to the nodes' CPUs when asked)."""
        return self.layout.pinning.argv(DaemonRole.NODE, ["slurmd", "-N", node])

    def pinning_differs(self) -> bool:
        """A running slurmdbd, slurmctld or slurmd sits on CPUs other than the layout's
        ``pinning`` asks for its role (never for an unpinned role)."""
        lay = self.layout
        found = [(DaemonRole.LOGIN, procs.running_pid(lay.pid_file(name), name))
                 for name in ("slurmdbd", "slurmctld")]
        found += [(DaemonRole.NODE, procs.running_pid(lay.pid_file("slurmd", n.name), "slurmd"))
                  for n in lay.nodes]
        return any(pid is not None and lay.pinning.differs(role, pid) for role, pid in found)

    def ctld_on_other_config(self) -> bool:
        """slurmctld runs, started on a config file other than the site's (``-f``)."""
        pid = procs.running_pid(self.layout.pid_file("slurmctld"), "slurmctld")
        return pid is not None and procs.config_arg(pid) is not None

    def requeue_running(self) -> list[str]:
        """Requeue (else cancel) jobs that are running: ``down`` kills their processes,
        and in a container the host's boot time never changes, so slurmctld would
        otherwise keep them RUNNING forever after the next ``up``. Requeue is what a
        real site does to jobs on a failed node."""
        if not self.readiness.controller_up():
            return []
        out = try_output(self.runner, ["squeue", "-h", "-t", "R,CG,S,CF", "-o", "%i"], 15)
        jobs = sorted(set((out or "").split()))
        if not jobs:
            return []
        res = self.runner.run(["scontrol", "requeue", ",".join(jobs)],
                              check=False, retry=False, timeout=30)
        if res.returncode != 0:  # some refuse requeue (--no-requeue): cancel those
            left = try_output(self.runner, ["squeue", "-h", "-t", "R,S,CF", "-o", "%i"], 15)
            if (left or "").split():
                self.runner.run(["scancel", *(left or "").split()], check=False, retry=False)
        return [f"{len(jobs)} running job(s) (requeued)"]

    def stop_slurm(self) -> list[str]:
        """scontrol shutdown, then SIGTERM/SIGKILL whatever of ours is left."""
        lay = self.layout
        pids: dict[int, str] = {}
        ctld = procs.running_pid(lay.pid_file("slurmctld"), "slurmctld")
        if ctld:
            pids[ctld] = "slurmctld"
        for node in lay.nodes:
            pid = procs.running_pid(lay.pid_file("slurmd", node.name), "slurmd")
            if pid:
                pids[pid] = "slurmd"
        if not pids:
            return []
        if ctld:
            self.runner.run(["scontrol", "shutdown"], check=False, retry=False, timeout=15)
        left = procs.wait_gone(list(pids), pids, 15.0)
        for pid in left:  # a slurmd whose controller is gone can hang: SIGKILL it
            if pids[pid] == "slurmctld":
                procs.stop(pid, "slurmctld", timeout=5)
            else:
                procs.kill(pid, "slurmd")
        procs.wait_gone(left, pids, 5.0)
        return sorted(set(pids.values()))

    def stop_slurmdbd(self) -> list[str]:
        pid = procs.running_pid(self.layout.pid_file("slurmdbd"), "slurmdbd")
        if not pid:
            return []
        procs.stop(pid, "slurmdbd", timeout=15.0)
        return ["slurmdbd"]

    def sweep_leftovers(self) -> list[str]:
        """Stop what survived: slurmstepd of jobs still running (and their tasks), and
        anything else that carries this cluster's marker."""
        state = str(self.layout.state_dir)
        found = {**procs.step_daemons(state),
                 **procs.marked_processes(OWNER_ENV, self.layout.owner_marker)}
        for pid, name in found.items():
            procs.terminate(pid, name)
        left = procs.wait_gone(list(found), found, 5.0)
        for pid in left:
            procs.kill(pid, found[pid])
        return [f"{name} (leftover)" for name in sorted(set(found.values()))]
