"""Where one dev cluster lives and what its config files say.

Owns: ``DevClusterLayout`` (one cluster's state directory and every path under
it, its slurm.conf directory, node names, shapes and ports, its accounting
database, the directory of what the clusters of one host share, and the
site-realistic settings of ``site.SiteSpec``) and ``render_configs`` (slurm.conf,
gres.conf and slurmdbd.conf rendered from the Jinja2 templates beside this module).
Must not: start processes or write files (``cluster`` and its parts do), or know how
several clusters on one host are numbered (``lanes`` does).

State directory of the first cluster (``$DETHPC_DEVCLUSTER_DIR`` or
``/var/lib/dethpc-devcluster``), which is also the shared directory::

    etc/db.password   run/*.pid  run/mysqld/  log/*.log   spool/ctld   spool/n1..n4
    tmp/n1..n4        mysql/ (a private MariaDB data directory, shared)
    dev/nvidia0..1    (the fake GPUs' device files: symlinks to /dev/null)
    images/           (the container image, shared)

The first cluster's Slurm config is written to ``/etc/slurm`` so that every client
command finds it without ``SLURM_CONF``; the others' to their own directory
(``lanes.lane_layout``), found through ``SLURM_CONF``.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from dethpc.common.jobenv import ENV_DEVCLUSTER_DIR, ENV_DEVCLUSTER_OWNER
from dethpc.devcluster.pinning import CpuPinning
from dethpc.devcluster.releases import DEFAULT_RELEASE, SlurmRelease, path_prefix
from dethpc.devcluster.site import SiteSpec, gres_conf_lines

#: First line of every file we write; a file without it is not ours to overwrite.
MARKER = "Managed by dethpc devcluster"
DEFAULT_STATE_DIR = "/var/lib/dethpc-devcluster"
SLURM_ETC = Path("/etc/slurm")
#: Environment variable set on every daemon we start; ``down`` finds leftovers by it.
OWNER_ENV = ENV_DEVCLUSTER_OWNER


def base_dir() -> Path:
    """The first cluster's state directory (and the shared one)."""
    return Path(os.environ.get(ENV_DEVCLUSTER_DIR) or DEFAULT_STATE_DIR)


@dataclass(frozen=True)
class Node:
    name: str
    port: int


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


@dataclass(frozen=True)
class DevClusterLayout:
    """Every name, port and path of one dev cluster."""

    state_dir: Path = field(default_factory=lambda: base_dir())
    hostname: str = field(default_factory=_short_hostname)
    cluster_name: str = "devcluster"
    #: which of the host's dev clusters this is (``lanes``); 1 is the one at /etc/slurm
    lane: int = 1
    #: node names are ``<node_prefix>1`` .. ``<node_prefix><node_count>``
    node_prefix: str = "n"
    node_count: int = 4
    #: lane 1's first slurmd port; below the launchers' rendezvous ports (15000-31999,
    #: dethpc.launch._common.derive_port), which a job id ending in the same digits chose:
    #: job 2033's DeepSpeed rendezvous found lane 4's slurmd on 17033
    first_node_port: int = 7001
    cpus: int = 16
    #: RealMemory of every node (MB); DefMemPerCPU x cpus must not exceed it
    memory_mb: int = 16000
    grace_time: int = 10
    ctld_port: int = 6817
    dbd_port: int = 6819
    db_port: int = 13306
    #: this cluster's accounting database in the shared MariaDB (its own slurmdbd's)
    db_name: str = "slurm_acct_db"
    account: str = "dethpc"
    slurm_etc: Path = SLURM_ETC
    #: what the host's clusters share (MariaDB, munged's record, the image); None: state_dir
    shared_dir: Path | None = None
    site: SiteSpec = field(default_factory=SiteSpec)
    #: which Slurm runs it: Debian's 22.05 (on the default PATH) or a release built here
    release: SlurmRelease = DEFAULT_RELEASE
    #: the CPUs the login side and the nodes run on (``pinning``; default: not pinned)
    pinning: CpuPinning = field(default_factory=CpuPinning)

    def __post_init__(self) -> None:
        names = {n.name for n in self.nodes}
        unknown = [n for n in self.site.gres.nodes if n not in names]
        if unknown:
            raise ValueError(f"site.gres.nodes: {unknown} are not nodes of the dev cluster; "
                             f"allowed: {sorted(names)}")
        if self.site.def_mem_per_cpu_mb * self.cpus > self.memory_mb:
            raise ValueError(
                f"site.def_mem_per_cpu_mb: {self.site.def_mem_per_cpu_mb} x {self.cpus} CPUs "
                f"exceeds memory_mb={self.memory_mb}; a whole-node job would not fit")

    @property
    def nodes(self) -> list[Node]:
        return [Node(f"{self.node_prefix}{i + 1}", self.first_node_port + i)
                for i in range(self.node_count)]

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @property
    def nodelist(self) -> str:
        return f"{self.node_prefix}[1-{self.node_count}]"

    @property
    def shared(self) -> Path:
        """The directory of what every dev cluster of this host shares."""
        return self.shared_dir or self.state_dir

    @property
    def slurm_prefix(self) -> Path | None:
        """Where this cluster's Slurm is installed (None: Debian's, on the default PATH);
        a built release's stable link (``slurm_build.current_link``)."""
        return self.shared / "slurm" / self.release.value if self.release.built else None

    @property
    def path_prefix(self) -> list[str]:
        """Directories to put before ``$PATH`` so that ``sbatch`` & co. are this
        cluster's (none for Debian's Slurm)."""
        return path_prefix(self.slurm_prefix)

    @property
    def slurm_conf(self) -> Path:
        return self.slurm_etc / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        return self.slurm_etc / "gres.conf"

    @property
    def prolog(self) -> Path:
        """The nodes' Prolog (releases with ``fault_prolog``): a launch failure on demand."""
        return self.state_dir / "prolog.sh"

    @property
    def fail_next_prolog(self) -> Path:
        """Created by a test: the next job launch on any node fails in the Prolog (once:
        the Prolog takes the file). Slurm drains that node ("Prolog error") and requeues
        the job held ("launch failed requeued held")."""
        return self.state_dir / "fail-next-prolog"

    @property
    def dev_dir(self) -> Path:
        """The fake GPUs' device files (symlinks to /dev/null)."""
        return self.state_dir / "dev"

    def gpu_devices(self) -> list[Path]:
        return [self.dev_dir / name for name in self.site.gres.device_names()]

    def node_gres(self, node: str) -> str | None:
        """``Gres=`` of ``node``'s line, or None for a node without GPUs."""
        return self.site.gres.node_gres if node in self.site.gres.nodes else None

    @property
    def slurmdbd_conf(self) -> Path:
        return self.slurm_etc / "slurmdbd.conf"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def etc_dir(self) -> Path:
        return self.state_dir / "etc"

    @property
    def mysql_dir(self) -> Path:
        return self.shared / "mysql"

    @property
    def mysql_run_dir(self) -> Path:
        """Socket and pid file of MariaDB (owned by mysql, which must write there)."""
        return self.shared / "run" / "mysqld"

    @property
    def mysql_socket(self) -> Path:
        return self.mysql_run_dir / "mysqld.sock"

    @property
    def mariadb_log(self) -> Path:
        return self.shared / "log" / "mariadb.log"

    @property
    def db_password_file(self) -> Path:
        return self.shared / "etc" / "db.password"

    @property
    def lock_file(self) -> Path:
        """This cluster's lock: ``up``, ``down`` and ``devcluster.faults`` hold it."""
        return self.state_dir / "devcluster.lock"

    @property
    def shared_lock_file(self) -> Path:
        """The lock of what the clusters share (packages, /etc/hosts, munged, MariaDB)."""
        return self.shared / "shared.lock"

    @property
    def owner_marker(self) -> str:
        """``$DETHPC_DEVCLUSTER_OWNER`` of this cluster's daemons (``down`` finds them by it)."""
        return str(self.state_dir)

    @property
    def shared_marker(self) -> str:
        """``$DETHPC_DEVCLUSTER_OWNER`` of the shared daemons (munged, MariaDB)."""
        return f"{self.shared}:shared"

    def pid_file(self, daemon: str, node: str | None = None) -> Path:
        """Pid file of ``daemon`` (slurmctld, slurmdbd, slurmd+node: this cluster's;
        mariadbd, munged: the shared ones)."""
        if daemon == "slurmd":
            return self.run_dir / f"slurmd.{node}.pid"
        if daemon == "munged":
            # munged writes its own pid file in /run/munge; this one records that we started it.
            return self.shared / "run" / "munged.ours"
        if daemon == "mariadbd":
            return self.shared / "run" / "mariadbd.pid"
        return self.run_dir / f"{daemon}.pid"

    def directories(self) -> list[Path]:
        """Directories ``up`` creates (owned by root unless ``host`` says otherwise)."""
        dirs = [self.state_dir, self.run_dir, self.log_dir, self.etc_dir, self.dev_dir,
                self.state_dir / "spool" / "ctld", self.shared / "run", self.shared / "log",
                self.shared / "etc"]
        for n in self.nodes:
            dirs += [self.state_dir / "spool" / n.name, self.state_dir / "tmp" / n.name]
        return list(dict.fromkeys(dirs))


def render_configs(layout: DevClusterLayout, db_password: str) -> dict[Path, str]:
    """Render slurm.conf, gres.conf and slurmdbd.conf: ``{destination: text}``."""
    # Imported here so that `status` and the root/Debian checks work without jinja2.
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("dethpc.devcluster", "templates"),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - config files, not HTML
    )
    values = {
        "marker": MARKER,
        "state_dir": str(layout.state_dir),
        "hostname": layout.hostname,
        "cluster_name": layout.cluster_name,
        "ctld_port": layout.ctld_port,
        "dbd_port": layout.dbd_port,
        "db_port": layout.db_port,
        "db_password": db_password,
        "db_name": layout.db_name,
        "nodes": layout.nodes,
        "nodelist": layout.nodelist,
        "cpus": layout.cpus,
        "memory_mb": layout.memory_mb,
        "grace_time": layout.grace_time,
        "site": layout.site,
        "node_gres": {n.name: layout.node_gres(n.name) for n in layout.nodes},
        "gres_lines": gres_conf_lines(layout.site.gres, str(layout.dev_dir)),
        "release": layout.release,
    }
    return {
        layout.slurm_conf: env.get_template("slurm.conf.j2").render(values),
        layout.gres_conf: env.get_template("gres.conf.j2").render(values),
        layout.slurmdbd_conf: env.get_template("slurmdbd.conf.j2").render(values),
    }
