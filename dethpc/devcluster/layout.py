"""Where the dev cluster lives and what its config files say.

Owns: ``DevClusterLayout`` (the state directory, every path under it, the
node names, shapes and ports, and the site-realistic settings of
``site.SiteSpec``) and ``render_configs`` (slurm.conf, gres.conf and
slurmdbd.conf rendered from the Jinja2 templates beside this module).
Must not: start processes or write files (``cluster`` does that).

State directory (``$DETHPC_DEVCLUSTER_DIR`` or ``/var/lib/dethpc-devcluster``)::

    etc/db.password   run/*.pid  run/mysqld/  log/*.log   spool/ctld   spool/n1..n4
    tmp/n1..n4        mysql/ (a private MariaDB data directory)
    dev/nvidia0..1    (the fake GPUs' device files: symlinks to /dev/null)

The Slurm config itself is written to ``/etc/slurm`` so that every client
command finds it without ``SLURM_CONF``.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from dethpc.devcluster.site import SiteSpec, gres_conf_lines

#: First line of every file we write; a file without it is not ours to overwrite.
MARKER = "Managed by dethpc devcluster"
DEFAULT_STATE_DIR = "/var/lib/dethpc-devcluster"
SLURM_ETC = Path("/etc/slurm")
#: Environment variable set on every daemon we start; ``down`` finds leftovers by it.
OWNER_ENV = "DETHPC_DEVCLUSTER_OWNER"


@dataclass(frozen=True)
class Node:
    name: str
    port: int


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


@dataclass(frozen=True)
class DevClusterLayout:
    """Every name, port and path of one dev cluster."""

    state_dir: Path = field(
        default_factory=lambda: Path(os.environ.get("DETHPC_DEVCLUSTER_DIR") or DEFAULT_STATE_DIR)
    )
    hostname: str = field(default_factory=_short_hostname)
    cluster_name: str = "devcluster"
    node_count: int = 4
    first_node_port: int = 17001
    cpus: int = 16
    #: RealMemory of every node (MB); DefMemPerCPU x cpus must not exceed it
    memory_mb: int = 16000
    grace_time: int = 10
    ctld_port: int = 6817
    dbd_port: int = 6819
    db_port: int = 13306
    account: str = "dethpc"
    slurm_etc: Path = SLURM_ETC
    site: SiteSpec = field(default_factory=SiteSpec)

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
        return [Node(f"n{i + 1}", self.first_node_port + i) for i in range(self.node_count)]

    @property
    def nodelist(self) -> str:
        return f"n[1-{self.node_count}]"

    @property
    def slurm_conf(self) -> Path:
        return self.slurm_etc / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        return self.slurm_etc / "gres.conf"

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
        return self.state_dir / "mysql"

    @property
    def mysql_run_dir(self) -> Path:
        """Socket and pid file of MariaDB (owned by mysql, which must write there)."""
        return self.run_dir / "mysqld"

    @property
    def mysql_socket(self) -> Path:
        return self.mysql_run_dir / "mysqld.sock"

    @property
    def db_password_file(self) -> Path:
        return self.etc_dir / "db.password"

    @property
    def lock_file(self) -> Path:
        return self.state_dir / "devcluster.lock"

    def pid_file(self, daemon: str, node: str | None = None) -> Path:
        """Pid file of ``daemon`` (slurmctld, slurmdbd, mariadbd, munged, slurmd+node)."""
        if daemon == "slurmd":
            return self.run_dir / f"slurmd.{node}.pid"
        if daemon == "munged":
            # munged writes its own pid file in /run/munge; this one records that we started it.
            return self.run_dir / "munged.ours"
        return self.run_dir / f"{daemon}.pid"

    def directories(self) -> list[Path]:
        """Directories ``up`` creates (owned by root unless ``cluster`` says otherwise)."""
        dirs = [self.state_dir, self.run_dir, self.log_dir, self.etc_dir, self.dev_dir,
                self.state_dir / "spool" / "ctld"]
        for n in self.nodes:
            dirs += [self.state_dir / "spool" / n.name, self.state_dir / "tmp" / n.name]
        return dirs


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
        "nodes": layout.nodes,
        "nodelist": layout.nodelist,
        "cpus": layout.cpus,
        "memory_mb": layout.memory_mb,
        "grace_time": layout.grace_time,
        "site": layout.site,
        "node_gres": {n.name: layout.node_gres(n.name) for n in layout.nodes},
        "gres_lines": gres_conf_lines(layout.site.gres, str(layout.dev_dir)),
    }
    return {
        layout.slurm_conf: env.get_template("slurm.conf.j2").render(values),
        layout.gres_conf: env.get_template("gres.conf.j2").render(values),
        layout.slurmdbd_conf: env.get_template("slurmdbd.conf.j2").render(values),
    }
