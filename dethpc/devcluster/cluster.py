"""Bring a single-host Slurm cluster up, down, and report on it.

Owns: ``DevCluster.up`` (install packages, munge key, /etc/hosts, configs and
the fake GPUs' device files, then munged -> MariaDB -> slurmdbd -> slurmctld
-> 4 x slurmd, wait for usable nodes, accounting records: QoS, accounts and
associations as ``site.plan_accounting`` plans them), ``DevCluster.down`` (stops only what ``up``
started, recorded in pid files and by an environment marker) and
``DevCluster.status``. Every step is idempotent: ``up`` on a running cluster
returns in well under a second, on a partial one it repairs what is missing.
Must not: print (it reports through the ``say`` callback) or be imported by
library code that runs on a real site.

The measured facts this builds on are in docs/dev-cluster.md.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dethpc.devcluster.procs as procs
from dethpc.common.errors import CommandError, DethpcError
from dethpc.common.runner import CommandRunner
from dethpc.devcluster.layout import MARKER, OWNER_ENV, DevClusterLayout, render_configs
from dethpc.devcluster.site import (
    ASSOC_FORMAT,
    QOS_FORMAT,
    AccountingState,
    member_names,
    parse_assocs,
    parse_qos,
    plan_accounting,
)

PACKAGES: tuple[str, ...] = (
    "slurm-wlm", "slurmdbd", "munge", "mariadb-server", "openmpi-bin", "libopenmpi-dev",
)
USABLE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
RESUMABLE_STATES = frozenset({"down", "drained", "draining", "fail", "failing"})
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_RUN = Path("/run/munge")
HOSTS = Path("/etc/hosts")
#: what the fake GPUs' device files point to (slurmd wants a character device)
GPU_DEVICE_TARGET = Path("/dev/null")


@dataclass
class Timings:
    steps: list[tuple[str, float]] = field(default_factory=list)
    start: float = field(default_factory=time.monotonic)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.steps.append((name, time.monotonic() - t0))

    @property
    def total(self) -> float:
        return time.monotonic() - self.start

    def summary(self) -> str:
        parts = [f"{n} {s:.1f}s" for n, s in self.steps if s >= 0.05]
        return f"total {self.total:.1f}s" + (f" ({', '.join(parts)})" if parts else "")


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


class DevCluster:
    """One dev cluster, described by ``layout``; commands run through ``runner``."""

    def __init__(
        self,
        layout: DevClusterLayout | None = None,
        runner: CommandRunner | None = None,
        say: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        self.layout = layout or DevClusterLayout()
        self.runner = runner or CommandRunner(timeout=60.0, retries=0)
        self.say = say
        owner_env = {**os.environ, OWNER_ENV: str(self.layout.state_dir)}
        #: Runs the daemons that fork themselves: they (and slurmstepd) carry the marker.
        self.daemon_runner = CommandRunner(timeout=60.0, retries=0, env=owner_env)
        #: slurmd started by this `up`, with the time they were started.
        self._started_slurmd: dict[str, float] = {}

    # ------------------------------------------------------------------ checks
    @staticmethod
    def preflight() -> None:
        """Refuse clearly when this machine cannot host the dev cluster."""
        if not Path("/etc/debian_version").exists() or shutil.which("apt-get") is None:
            raise DethpcError(
                "the dev cluster needs Debian or Ubuntu (apt-get and /etc/debian_version "
                "were not found). Use a Debian 12 / Ubuntu machine or container, or run "
                "the tests against an existing Slurm cluster instead."
            )
        if os.geteuid() != 0:
            raise DethpcError(
                "the dev cluster must be started as root: it installs packages, writes "
                "/etc/slurm and /etc/hosts and starts munged, MariaDB and the Slurm daemons. "
                "Run `sudo scripts/devcluster up`."
            )

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
        res = self._try(["scontrol", "ping"], timeout=10)
        return res is not None and "is UP" in res

    def node_states(self) -> dict[str, str]:
        """``{node: state}`` from sinfo (``idle``, ``down*``, ``drained`` ...)."""
        out = self._try(["sinfo", "-h", "-N", "-o", "%N|%T"], timeout=15)
        states: dict[str, str] = {}
        for line in (out or "").splitlines():
            name, _, state = line.strip().partition("|")
            if name:
                states[name] = state.strip().lower()
        return states

    def status(self) -> ClusterStatus:
        lay = self.layout
        daemons = [DaemonState("munged", *self._munged_pid())]
        for name in ("mariadbd", "slurmdbd", "slurmctld"):
            daemons.append(DaemonState(name, procs.running_pid(lay.pid_file(name), name), True))
        for node in lay.nodes:
            pid = procs.running_pid(lay.pid_file("slurmd", node.name), "slurmd")
            daemons.append(DaemonState(f"slurmd {node.name}", pid, True))
        ctld = self.controller_up()
        sinfo = self._try(["sinfo"], timeout=15) if ctld else None
        return ClusterStatus(
            daemons=daemons,
            munge_ok=self.munge_ok(),
            controller_up=ctld,
            nodes=self.node_states() if ctld else {},
            sinfo=sinfo or "",
            expected_nodes=lay.node_count,
        )

    # ---------------------------------------------------------------------- up
    def up(self, *, force: bool = False, users: Sequence[str] = (),
           wait_timeout: float = 120.0) -> Timings:
        """Start (or repair) the cluster and wait until every node is usable."""
        self.preflight()
        timings = Timings()
        self.layout.state_dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            with timings.step("check"):
                if self.status().ready and not self._configs_stale() \
                        and not self._ctld_on_other_config():
                    self._ensure_accounts(users)
                    self.say("dev cluster already up")
                    return timings
            with timings.step("packages"):
                self._ensure_packages()
            with timings.step("files"):
                self._ensure_dirs()
                self._ensure_hosts()
                self._ensure_munge_key()
                self._ensure_gpu_devices()
                password = self._db_password()
                changed = self._write_configs(password, force)
            with timings.step("munged"):
                self._ensure_munged()
            with timings.step("mariadb"):
                self._ensure_mariadb(password)
            with timings.step("slurmdbd"):
                self._ensure_slurmdbd(restart=self.layout.slurmdbd_conf in changed)
                self._ensure_cluster_record()
            with timings.step("slurmctld"):
                self._ensure_slurm(restart=bool(
                    {self.layout.slurm_conf, self.layout.gres_conf} & changed))
            with timings.step("nodes"):
                self._wait_nodes(wait_timeout)
            with timings.step("accounts"):
                self._ensure_accounts(users)
        site = self.layout.site
        self.say(f"dev cluster up: {self.layout.node_count} nodes, partitions debug/low/high, "
                 f"gres {site.gres.node_gres} on {','.join(site.gres.nodes)}, QoS "
                 f"{'/'.join(q.name for q in site.qos)}, accounts "
                 f"{'/'.join(a.name for a in site.accounts)}")
        return timings

    def _ensure_packages(self) -> None:
        missing = [p for p in PACKAGES if not self._installed(p)]
        if not missing:
            return
        self.say(f"installing {' '.join(missing)} (apt-get) ...")
        apt = CommandRunner(timeout=1800.0, retries=0,
                            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        apt.run(["apt-get", "update"])
        apt.run(["apt-get", "install", "-y", *missing])

    def _installed(self, package: str) -> bool:
        res = self.runner.run(["dpkg-query", "-W", "-f=${Status}", package],
                              check=False, retry=False)
        return res.returncode == 0 and "install ok installed" in res.stdout

    def _ensure_dirs(self) -> None:
        for d in self.layout.directories():
            d.mkdir(parents=True, exist_ok=True)
        self.layout.state_dir.chmod(0o755)
        self.layout.etc_dir.chmod(0o700)
        for d, mode in ((self.layout.mysql_dir, 0o750), (self.layout.mysql_run_dir, 0o755)):
            d.mkdir(exist_ok=True)
            shutil.chown(d, "mysql", "mysql")
            d.chmod(mode)  # run/mysqld readable: `status` works for any user
        self.layout.slurm_etc.mkdir(parents=True, exist_ok=True)

    def _ensure_hosts(self) -> None:
        """Map every node name to 127.0.0.1 in /etc/hosts (appended once, never duplicated)."""
        known: set[str] = set()
        for line in HOSTS.read_text().splitlines():
            words = line.split("#", 1)[0].split()
            if words and words[0] == "127.0.0.1":
                known.update(words[1:])
        missing = [n.name for n in self.layout.nodes if n.name not in known]
        if missing:
            text = HOSTS.read_text()
            sep = "" if not text or text.endswith("\n") else "\n"
            # Append in place: /etc/hosts is often a bind mount that cannot be replaced.
            with HOSTS.open("a") as fh:
                fh.write(f"{sep}127.0.0.1 {' '.join(missing)}  # dethpc devcluster\n")

    def _ensure_munge_key(self) -> None:
        if MUNGE_KEY.exists():
            return
        MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
        self.runner.run(["mungekey", "-c", "-k", str(MUNGE_KEY)])
        shutil.chown(MUNGE_KEY, "munge", "munge")
        MUNGE_KEY.chmod(0o400)

    def _ensure_gpu_devices(self) -> None:
        """The fake GPUs' device files: symlinks to /dev/null (a plain file makes slurmd
        log "not a valid character or block device" and set no CUDA_VISIBLE_DEVICES)."""
        for dev in self.layout.gpu_devices():
            if dev.is_symlink() and Path(os.readlink(dev)) == GPU_DEVICE_TARGET:
                continue
            if dev.is_symlink() or dev.exists():
                dev.unlink()
            dev.symlink_to(GPU_DEVICE_TARGET)

    def _configs_stale(self) -> bool:
        """True when a config file on disk differs from what ``up`` would write now
        (then ``up`` must not take the fast path: the running daemons read old files)."""
        path = self.layout.db_password_file
        if not path.exists():
            return True
        rendered = render_configs(self.layout, path.read_text().strip())
        for dest, text in rendered.items():
            if not dest.exists() or dest.read_text() != text:
                return True
        return any(not d.is_symlink() for d in self.layout.gpu_devices())

    def _db_password(self) -> str:
        path = self.layout.db_password_file
        if path.exists():
            return path.read_text().strip()
        password = secrets.token_hex(16)
        path.write_text(password + "\n")
        path.chmod(0o600)
        return password

    def _write_configs(self, password: str, force: bool) -> set[Path]:
        changed: set[Path] = set()
        for dest, text in render_configs(self.layout, password).items():
            if dest.exists():
                old = dest.read_text()
                if old == text:
                    continue
                if MARKER not in old.split("\n", 1)[0] and not force:
                    raise DethpcError(
                        f"{dest} exists and was not written by the dev cluster; refusing to "
                        "overwrite it. Move it away, or run `up --force` on a throwaway machine."
                    )
            dest.write_text(text)
            dest.chmod(0o600 if dest == self.layout.slurmdbd_conf else 0o644)
            changed.add(dest)
        return changed

    def _munged_pid(self) -> tuple[int | None, bool]:
        """(pid of the running munged, whether we started it)."""
        ours = procs.running_pid(self.layout.pid_file("munged"), "munged")
        if ours:
            return ours, True
        return procs.running_pid(MUNGE_RUN / "munged.pid", "munged"), False

    def _ensure_munged(self) -> None:
        if self.munge_ok():
            return
        pid, _ = self._munged_pid()
        if pid:  # running but not answering: replace it
            procs.stop(pid, "munged", timeout=5)
        MUNGE_RUN.mkdir(parents=True, exist_ok=True)
        shutil.chown(MUNGE_RUN, "munge", "munge")
        MUNGE_RUN.chmod(0o755)
        self.daemon_runner.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged", "--force"])
        self._wait("munged to answer `munge -n | unmunge`", self.munge_ok, 20,
                   log=Path("/var/log/munge/munged.log"))
        started = procs.read_pid(MUNGE_RUN / "munged.pid")
        if started:
            self.layout.pid_file("munged").write_text(f"{started}\n")

    # MariaDB: a private instance (own data dir, socket and port) so that a system
    # MariaDB is never touched and `down` can stop ours without asking.
    def _mysql_client(self, program: str) -> list[str]:
        return [program, "--no-defaults", f"--socket={self.layout.mysql_socket}", "-u", "root"]

    def _mariadb_ok(self) -> bool:
        res = self.runner.run([*self._mysql_client("mariadb-admin"), "ping"],
                              check=False, retry=False, timeout=10)
        return res.returncode == 0

    def _ensure_mariadb(self, password: str) -> None:
        lay = self.layout
        pid = procs.running_pid(lay.pid_file("mariadbd"), "mariadbd")
        if pid and self._mariadb_ok():
            return
        if pid:
            procs.stop(pid, "mariadbd", timeout=30)
        if not (lay.mysql_dir / "mysql").is_dir():
            self.runner.run(["mariadb-install-db", "--no-defaults", "--user=mysql",
                             f"--datadir={lay.mysql_dir}", "--skip-test-db",
                             "--auth-root-authentication-method=socket"], timeout=300)
        log = lay.log_dir / "mariadb.log"
        argv = ["/usr/sbin/mariadbd", "--no-defaults", "--user=mysql",
                f"--datadir={lay.mysql_dir}", f"--socket={lay.mysql_socket}",
                f"--pid-file={lay.mysql_run_dir / 'mariadbd.pid'}", f"--log-error={log}",
                "--bind-address=127.0.0.1", f"--port={lay.db_port}", "--skip-name-resolve",
                "--innodb-buffer-pool-size=128M", "--innodb-lock-wait-timeout=900"]
        # mariadbd does not fork: run it in its own session, detached from us.
        with open(os.devnull, "rb") as devnull, log.open("ab") as out:
            proc = subprocess.Popen(  # noqa: S603 - fixed argv
                argv, stdin=devnull, stdout=out, stderr=out, start_new_session=True,
                env=self.daemon_runner.env and dict(self.daemon_runner.env), close_fds=True,
            )
        # Our own record (mariadbd's pid file is not readable by other users).
        lay.pid_file("mariadbd").write_text(f"{proc.pid}\n")
        self._wait("MariaDB to answer ping", self._mariadb_ok, 60, log=log,
                   died=lambda: proc.poll() is not None)
        sql = (
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
            f"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
            "CREATE DATABASE IF NOT EXISTS slurm_acct_db;"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
            "FLUSH PRIVILEGES;"
        )
        self.runner.run([*self._mysql_client("mariadb"), "-e", sql])

    def _ensure_slurmdbd(self, restart: bool) -> None:
        pid_file = self.layout.pid_file("slurmdbd")
        pid = procs.running_pid(pid_file, "slurmdbd")
        if pid and restart:
            procs.stop(pid, "slurmdbd", timeout=15)
            pid = None
        if not pid:
            self.daemon_runner.run(["slurmdbd"])
        self._wait("slurmdbd to listen", lambda: _port_open(self.layout.dbd_port), 60,
                   log=self.layout.log_dir / "slurmdbd.log")

    def _ensure_cluster_record(self) -> None:
        name = self.layout.cluster_name
        out = self.runner.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"],
                              timeout=30).stdout
        if name not in out.split():
            self.runner.run(["sacctmgr", "-i", "add", "cluster", name], timeout=30)

    def _ensure_slurm(self, restart: bool) -> None:
        lay = self.layout
        if restart:
            self._stop_slurm()
        elif self._ctld_on_other_config():  # left by a fault test (devcluster.faults)
            ctld = procs.running_pid(lay.pid_file("slurmctld"), "slurmctld")
            if ctld:
                procs.stop(ctld, "slurmctld", timeout=20)
        if not procs.running_pid(lay.pid_file("slurmctld"), "slurmctld"):
            self.daemon_runner.run(["slurmctld"])
        self._wait("slurmctld to answer `scontrol ping`", self.controller_up, 60,
                   log=lay.log_dir / "slurmctld.log")
        for node in lay.nodes:
            if not procs.running_pid(lay.pid_file("slurmd", node.name), "slurmd"):
                self._started_slurmd[node.name] = time.time()
                self.daemon_runner.run(["slurmd", "-N", node.name])

    def _ctld_on_other_config(self) -> bool:
        """slurmctld runs, started on a config file other than the site's (``-f``)."""
        pid = procs.running_pid(self.layout.pid_file("slurmctld"), "slurmctld")
        return pid is not None and procs.config_arg(pid) is not None

    def _registered_since(self) -> dict[str, float]:
        """``{node: SlurmdStartTime}`` as the controller knows it (epoch seconds)."""
        out = self._try(["scontrol", "-o", "show", "node"], timeout=15) or ""
        seen: dict[str, float] = {}
        for line in out.splitlines():
            fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
            try:
                seen[fields["NodeName"]] = time.mktime(
                    time.strptime(fields["SlurmdStartTime"], "%Y-%m-%dT%H:%M:%S"))
            except (KeyError, ValueError):
                continue
        return seen

    def _wait_nodes(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_resume = 0.0
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.node_states()
            usable = [n for n, s in states.items() if s in USABLE_STATES]
            if self._started_slurmd and len(usable) >= self.layout.node_count:
                # A node restored from saved state reads idle before its new slurmd
                # registers: wait until the controller has seen every slurmd we started.
                seen = self._registered_since()
                usable = [n for n in usable if seen.get(n, 0.0)
                          >= int(self._started_slurmd.get(n, 0.0)) - 1]
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

    def _ensure_accounts(self, users: Sequence[str]) -> None:
        """QoS, accounts and associations as ``site.plan_accounting`` plans them: root,
        $SUDO_USER, $DETHPC_DEVCLUSTER_USERS and ``users`` in every account (default
        account ``dethpc``, QoS ``normal``). Three queries when nothing is missing."""
        members = [u for u in member_names(
            ["root", os.environ.get("SUDO_USER", ""), *users,
             *os.environ.get("DETHPC_DEVCLUSTER_USERS", "").split(",")]) if _user_exists(u)]
        self.apply_accounting(members)

    def accounting_state(self) -> AccountingState:
        run = self.runner.run
        qos = run(["sacctmgr", "-n", "-P", "show", "qos", f"format={QOS_FORMAT}"], timeout=30)
        assoc = run(["sacctmgr", "-n", "-P", "show", "assoc",
                     f"cluster={self.layout.cluster_name}", f"format={ASSOC_FORMAT}"],
                    timeout=30)
        return AccountingState(parse_qos(qos.stdout), parse_assocs(assoc.stdout))

    def apply_accounting(self, members: Sequence[str], test_user: str | None = None) -> None:
        """Run the ``sacctmgr`` commands ``plan_accounting`` asks for (none when current)."""
        plan = plan_accounting(self.layout.site, self.layout.cluster_name,
                               self.accounting_state(), members, test_user)
        for argv in plan:
            self.runner.run(["sacctmgr", "-i", *argv], timeout=30)

    # -------------------------------------------------------------------- down
    def down(self) -> list[str]:
        """Stop what ``up`` started (and nothing else); return what was stopped."""
        self.preflight()
        if not self.layout.state_dir.exists():
            return []
        stopped: list[str] = []
        with self._locked():
            stopped += self._requeue_running()
            stopped += self._stop_slurm()
            lay = self.layout
            for name, grace in (("slurmdbd", 15.0), ("mariadbd", 60.0)):
                pid = procs.running_pid(lay.pid_file(name), name)
                if pid:
                    procs.stop(pid, name, timeout=grace)
                    stopped.append(name)
            record = lay.pid_file("munged")
            pid = procs.running_pid(record, "munged")
            if pid:
                procs.stop(pid, "munged", timeout=10)
                stopped.append("munged")
            record.unlink(missing_ok=True)
            stopped += self._sweep_leftovers()
        return stopped

    def _requeue_running(self) -> list[str]:
        """Requeue (else cancel) jobs that are running: ``down`` kills their processes,
        and in a container the host's boot time never changes, so slurmctld would
        otherwise keep them RUNNING forever after the next ``up``. Requeue is what a
        real site does to jobs on a failed node."""
        if not self.controller_up():
            return []
        out = self._try(["squeue", "-h", "-t", "R,CG,S,CF", "-o", "%i"], timeout=15) or ""
        jobs = sorted(set(out.split()))
        if not jobs:
            return []
        res = self.runner.run(["scontrol", "requeue", ",".join(jobs)],
                              check=False, retry=False, timeout=30)
        if res.returncode != 0:  # some refuse requeue (--no-requeue): cancel those
            left = self._try(["squeue", "-h", "-t", "R,S,CF", "-o", "%i"], timeout=15) or ""
            if left.split():
                self.runner.run(["scancel", *left.split()], check=False, retry=False)
        return [f"{len(jobs)} running job(s) (requeued)"]

    def _stop_slurm(self) -> list[str]:
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

    def _sweep_leftovers(self) -> list[str]:
        """Stop what survived: slurmstepd of jobs still running (and their tasks), and
        anything else that carries our marker."""
        state = str(self.layout.state_dir)
        found = {**procs.step_daemons(state), **procs.marked_processes(OWNER_ENV, state)}
        for pid, name in found.items():
            procs.terminate(pid, name)
        left = procs.wait_gone(list(found), found, 5.0)
        for pid in left:
            procs.kill(pid, found[pid])
        return [f"{name} (leftover)" for name in sorted(set(found.values()))]

    # ----------------------------------------------------------------- helpers
    def locked(self) -> AbstractContextManager[None]:
        """The dev cluster's lock: ``up``, ``down`` and ``devcluster.faults`` hold it."""
        return self._locked()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self.layout.lock_file.open("a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _try(self, argv: list[str], timeout: float) -> str | None:
        try:
            res = self.runner.run(argv, check=False, retry=False, timeout=timeout)
        except CommandError:
            return None
        return res.stdout if res.returncode == 0 else None

    def _wait(self, what: str, ok: Callable[[], bool], timeout: float,
              log: Path | None = None, died: Callable[[], bool] | None = None) -> None:
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


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _user_exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True
