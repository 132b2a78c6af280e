"""Faults the dev cluster suffers on purpose: slurmctld restarted, slurmdbd stopped.

Owns: ``ClusterFaults`` -- restart slurmctld (stop it through its pid file, start it
the way ``up`` does, wait until ``scontrol ping`` answers), optionally on a copy of
slurm.conf with a shorter ``MinJobAge`` (so that finished jobs leave ``squeue`` in
seconds, not five minutes), stop slurmdbd and start it again (wait until ``sacct``
answers), and ``restore``: slurmctld back on the site's own slurm.conf and slurmdbd
running, as ``up`` leaves them. Every step holds the dev cluster's lock, so a
concurrent ``up`` waits instead of repairing a fault half-way; ``slurmdbd_down``
holds it for the whole outage.
Must not: touch slurmd, MariaDB, munged or the configs ``up`` writes (the shorter
``MinJobAge`` lives in its own file beside slurm.conf), or leave a daemon stopped:
callers use ``restore`` in a ``finally``, and ``up`` itself restarts a slurmctld that
runs on another config file (``procs.config_arg``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dethpc.backends.slurm_parse import nodes_registering
from dethpc.common.errors import DethpcError
from dethpc.devcluster import procs
from dethpc.devcluster.cluster import DevCluster
from dethpc.devcluster.pinning import DaemonRole

#: the copy of slurm.conf a shortened MinJobAge runs on (beside slurm.conf: slurmctld
#: finds gres.conf and plugstack.conf in the directory of the file it was given)
FAULT_CONF_NAME = "slurm-fault.conf"


def with_min_job_age(conf_text: str, seconds: int) -> str:
    """``conf_text`` with its ``MinJobAge`` line set to ``seconds`` (appended if absent)."""
    if seconds < 1:
        raise ValueError(f"min_job_age: {seconds} is not allowed; at least 1 second")
    return with_settings(conf_text, {"MinJobAge": str(seconds)})


def with_settings(conf_text: str, settings: Mapping[str, str]) -> str:
    """``conf_text`` with each ``Key=value`` of ``settings`` in place of that key's line
    (appended when the file has none): a site policy switched on for one test."""
    for key, value in settings.items():
        line = f"{key}={value}"
        pattern = re.compile(rf"^{re.escape(key)}=.*$", re.MULTILINE | re.IGNORECASE)
        if pattern.search(conf_text):
            conf_text = pattern.sub(line.replace("\\", "\\\\"), conf_text)
        else:
            conf_text = conf_text.rstrip("\n") + f"\n{line}\n"
    return conf_text


def refused_rpcs(log: Path, start: int, uid: int) -> list[str]:
    """The RPC types slurmctld refused to ``uid`` under its per-user rate limit, read
    from its log from byte ``start`` on (``rl_log_freq=0`` logs every refusal:
    "RPC rate limit exceeded by uid U with REQUEST_X from ..., telling to back off")."""
    with log.open("rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    marker = f"RPC rate limit exceeded by uid {uid} with "
    return [ln.split(marker, 1)[1].split()[0] for ln in text.splitlines() if marker in ln]


@dataclass(frozen=True)
class FaultTiming:
    """How long one fault step took (seconds): stopping, and until it answered again."""

    stop_s: float
    start_s: float


class ClusterFaults:
    """Faults on the dev cluster described by ``cluster`` (its layout, runners, lock)."""

    def __init__(self, cluster: DevCluster | None = None, timeout: float = 60.0) -> None:
        self.cluster = cluster or DevCluster()
        self.timeout = timeout

    @property
    def fault_conf(self) -> Path:
        return self.cluster.layout.slurm_etc / FAULT_CONF_NAME

    # ------------------------------------------------------------ slurmctld
    def restart_slurmctld(self, *, min_job_age: int | None = None,
                          settings: Mapping[str, str] | None = None,
                          wait_nodes: bool = True) -> FaultTiming:
        """Stop slurmctld and start it again; with ``min_job_age`` or ``settings``, on a
        copy of slurm.conf whose ``MinJobAge`` is that many seconds and whose lines
        ``settings`` replaces (neither: the site's file). ``wait_nodes`` False returns
        as soon as ``scontrol ping`` answers (the nodes may not have registered yet:
        ``wait_nodes_usable``)."""
        with self.cluster.locked():
            return self._restart_slurmctld(min_job_age, wait_nodes, settings)

    def _restart_slurmctld(self, min_job_age: int | None, wait_nodes: bool = True,
                           settings: Mapping[str, str] | None = None) -> FaultTiming:
        lay = self.cluster.layout
        argv = ["slurmctld"]
        if min_job_age is None and not settings:
            self.fault_conf.unlink(missing_ok=True)
        else:
            text = lay.slurm_conf.read_text()
            if min_job_age is not None:
                text = with_min_job_age(text, min_job_age)
            self.fault_conf.write_text(with_settings(text, settings or {}))
            self.fault_conf.chmod(0o644)
            argv += ["-f", str(self.fault_conf)]
        t0 = time.monotonic()
        pid = procs.running_pid(lay.pid_file("slurmctld"), "slurmctld")
        if pid:
            procs.stop(pid, "slurmctld", timeout=20.0)
        t1 = time.monotonic()
        # on the CPUs `up` gives the login side (a scale cluster's --login-cpus), so a
        # restart does not move slurmctld off the core its CPU is metered on
        self.cluster.daemon_runner.run(lay.pinning.argv(DaemonRole.LOGIN, argv))
        self._wait("slurmctld to answer `scontrol ping`", self.cluster.controller_up,
                   lay.log_dir / "slurmctld.log")
        if wait_nodes:
            self.wait_nodes_usable()
        return FaultTiming(t1 - t0, time.monotonic() - t1)

    def wait_nodes_usable(self) -> None:
        """Until every slurmd has registered again after a restart (about 4 s here),
        sbatch --test-only refuses every job ("Requested node configuration is not
        available"): wait until no node reads UNKNOWN. A node drained or down for its
        own reasons (another test's "Kill task failed") is not waited for: ``up``
        resumes those."""
        self._wait("every node to register again", self.nodes_registered,
                   self.cluster.layout.log_dir / "slurmctld.log")

    def nodes_registered(self) -> bool:
        res = self.cluster.runner.run(["sinfo", "-h", "-N", "-o", "%T"], check=False,
                                      retry=False, timeout=15)
        lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
        return (res.returncode == 0 and len(lines) >= self.cluster.layout.node_count
                and not nodes_registering(res.stdout))

    def slurmctld_config(self) -> Path | None:
        """The config file the running slurmctld was given with ``-f`` (None: the
        site's own, or not running)."""
        pid = procs.running_pid(self.cluster.layout.pid_file("slurmctld"), "slurmctld")
        return procs.config_arg(pid) if pid else None

    # ------------------------------------------------------------- slurmdbd
    def stop_slurmdbd(self) -> float:
        """Stop slurmdbd (SIGTERM, SIGKILL after 15 s); the seconds it took."""
        with self.cluster.locked():
            return self._stop_slurmdbd()

    def _stop_slurmdbd(self) -> float:
        t0 = time.monotonic()
        pid = procs.running_pid(self.cluster.layout.pid_file("slurmdbd"), "slurmdbd")
        if pid:
            procs.stop(pid, "slurmdbd", timeout=15.0)
        return time.monotonic() - t0

    def start_slurmdbd(self) -> float:
        """Start slurmdbd unless it runs; wait until ``sacct`` answers. The seconds it took."""
        with self.cluster.locked():
            return self._start_slurmdbd()

    def _start_slurmdbd(self) -> float:
        lay = self.cluster.layout
        t0 = time.monotonic()
        if not procs.running_pid(lay.pid_file("slurmdbd"), "slurmdbd"):
            self.cluster.daemon_runner.run(lay.pinning.argv(DaemonRole.LOGIN, ["slurmdbd"]))
        self._wait("slurmdbd to answer `sacct`", self.sacct_answers, lay.log_dir / "slurmdbd.log")
        return time.monotonic() - t0

    def sacct_answers(self) -> bool:
        res = self.cluster.runner.run(["sacct", "-n", "-X", "-j", "1", "-o", "JobID"],
                                      check=False, retry=False, timeout=15)
        return res.returncode == 0

    @contextmanager
    def slurmdbd_down(self) -> Iterator[float]:
        """slurmdbd stopped for the ``with`` block (the lock held throughout, so ``up``
        waits); started again and answering on the way out, whatever happened. Yields
        the seconds stopping took."""
        with self.cluster.locked():
            try:
                yield self._stop_slurmdbd()
            finally:
                self._start_slurmdbd()

    # --------------------------------------------------------------- restore
    def restore(self) -> list[str]:
        """slurmctld on the site's slurm.conf and slurmdbd running, as ``up`` leaves
        them; the fault config removed. Returns what had to be repaired."""
        repaired: list[str] = []
        with self.cluster.locked():
            lay = self.cluster.layout
            if not procs.running_pid(lay.pid_file("slurmdbd"), "slurmdbd") \
                    or not self.sacct_answers():
                self._start_slurmdbd()
                repaired.append("slurmdbd")
            if self.slurmctld_config() is not None or not self.cluster.controller_up():
                self._restart_slurmctld(None)
                repaired.append("slurmctld")
            self.fault_conf.unlink(missing_ok=True)
        return repaired

    def _wait(self, what: str, ok: Callable[[], bool], log: Path) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if ok():
                return
            time.sleep(0.2)
        raise DethpcError(f"gave up after {self.timeout:.0f}s waiting for {what}; see {log}")
