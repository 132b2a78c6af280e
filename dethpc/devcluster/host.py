"""What a dev cluster needs from the host before any daemon starts.

Owns: ``HostSetup`` -- refusing a machine that cannot host the dev cluster
(``preflight``: Debian/apt and root), Debian's packages (``apt-get install`` of what is
missing), the directories of one cluster and of what the host's clusters share, the
node names in ``/etc/hosts`` (appended once, in place), the munge key, and the fake
GPUs' device files (symlinks to /dev/null), and local Unix users (``ensure_unix_user``:
``useradd`` when missing, for the test user and the site's unlimited users).
Must not: write Slurm's config files (``configs``), start daemons (``shared``,
``daemons``), or remove anything it did not create.
"""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Callable
from pathlib import Path

from dethpc.common.errors import DethpcError
from dethpc.common.runner import CommandRunner
from dethpc.devcluster.layout import DevClusterLayout

PACKAGES: tuple[str, ...] = (
    "slurm-wlm", "slurmdbd", "munge", "mariadb-server", "openmpi-bin", "libopenmpi-dev",
)
MUNGE_KEY = Path("/etc/munge/munge.key")
HOSTS = Path("/etc/hosts")
#: what the fake GPUs' device files point to (slurmd wants a character device)
GPU_DEVICE_TARGET = Path("/dev/null")


#: the nodes' Prolog (``DevClusterLayout.prolog``): a launch failure when a test asks
PROLOG = """#!/bin/sh
# dethpc dev cluster: fails the next job launch (on whichever node) when
# {flag} exists, once: the file is taken here.
if rm {flag} 2>/dev/null; then
  echo "dev cluster: launch failure asked for by a test" >&2
  exit 1
fi
exit 0
"""


class HostSetup:
    """Packages, directories, /etc/hosts, the munge key and device files for ``layout``."""

    def __init__(self, layout: DevClusterLayout, runner: CommandRunner,
                 say: Callable[[str], None]) -> None:
        self.layout, self.runner, self.say = layout, runner, say

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

    def ensure_packages(self, packages: tuple[str, ...] = PACKAGES) -> None:
        missing = [p for p in packages if not self.installed(p)]
        if not missing:
            return
        self.say(f"installing {' '.join(missing)} (apt-get) ...")
        apt = CommandRunner(timeout=1800.0, retries=0,
                            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        apt.run(["apt-get", "update"])
        apt.run(["apt-get", "install", "-y", *missing])

    def installed(self, package: str) -> bool:
        res = self.runner.run(["dpkg-query", "-W", "-f=${Status}", package],
                              check=False, retry=False)
        return res.returncode == 0 and "install ok installed" in res.stdout

    def ensure_dirs(self) -> None:
        lay = self.layout
        for d in lay.directories():
            d.mkdir(parents=True, exist_ok=True)
        lay.state_dir.chmod(0o755)
        lay.shared.chmod(0o755)
        lay.etc_dir.chmod(0o700)
        lay.db_password_file.parent.chmod(0o700)
        for d, mode in ((lay.mysql_dir, 0o750), (lay.mysql_run_dir, 0o755)):
            d.mkdir(exist_ok=True)
            shutil.chown(d, "mysql", "mysql")
            d.chmod(mode)  # run/mysqld readable: `status` works for any user
        lay.slurm_etc.mkdir(parents=True, exist_ok=True)
        if lay.release.traits.fault_prolog:
            lay.prolog.write_text(PROLOG.format(flag=lay.fail_next_prolog))
            lay.prolog.chmod(0o755)

    def ensure_hosts(self) -> None:
        """Map every node name to 127.0.0.1 in /etc/hosts (appended once, never duplicated)."""
        known: set[str] = set()
        for line in HOSTS.read_text().splitlines():
            words = line.split("#", 1)[0].split()
            if words and words[0] == "127.0.0.1":
                known.update(words[1:])
        missing = [n for n in self.layout.node_names if n not in known]
        if missing:
            text = HOSTS.read_text()
            sep = "" if not text or text.endswith("\n") else "\n"
            # Append in place: /etc/hosts is often a bind mount that cannot be replaced.
            with HOSTS.open("a") as fh:
                fh.write(f"{sep}127.0.0.1 {' '.join(missing)}  # dethpc devcluster\n")

    def ensure_munge_key(self) -> None:
        if MUNGE_KEY.exists():
            return
        MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
        self.runner.run(["mungekey", "-c", "-k", str(MUNGE_KEY)])
        shutil.chown(MUNGE_KEY, "munge", "munge")
        MUNGE_KEY.chmod(0o400)

    def ensure_gpu_devices(self) -> None:
        """The fake GPUs' device files: symlinks to /dev/null (a plain file makes slurmd
        log "not a valid character or block device" and set no CUDA_VISIBLE_DEVICES)."""
        for dev in self.layout.gpu_devices():
            if dev.is_symlink() and Path(os.readlink(dev)) == GPU_DEVICE_TARGET:
                continue
            if dev.is_symlink() or dev.exists():
                dev.unlink()
            dev.symlink_to(GPU_DEVICE_TARGET)

    def gpu_devices_ok(self) -> bool:
        return all(d.is_symlink() for d in self.layout.gpu_devices())

    def ensure_users(self, names: tuple[str, ...]) -> None:
        """Every Unix user of ``names`` exists (created when missing)."""
        for name in names:
            ensure_unix_user(self.runner, name)


def unix_user_exists(name: str) -> bool:
    """A local account of that name exists (``getpwnam``)."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def ensure_unix_user(runner: CommandRunner, name: str) -> None:
    """``useradd`` ``name`` (home, bash, own group) unless it exists; safe when several
    processes do it at once (``useradd`` exits 9 for the one that comes second)."""
    if unix_user_exists(name):
        return
    res = runner.run(["useradd", "--create-home", "--shell", "/bin/bash", "--user-group", name],
                     check=False, retry=False, timeout=60)
    if res.returncode != 0 and not unix_user_exists(name):
        raise DethpcError(f"useradd {name} failed (exit {res.returncode}): "
                          f"{(res.stderr or res.stdout).strip()}")
