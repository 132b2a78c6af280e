"""The daemons every dev cluster of the host shares: munged and one private MariaDB.

Owns: ``SharedServices`` -- munged (started only when ``munge -n | unmunge`` fails,
recorded as ours so that ``down`` stops only a munged it started), the private MariaDB
(own data directory, socket and port 13306 on 127.0.0.1, initialised on first use; a
system MariaDB is never touched), one accounting database per cluster in it with the
``slurm`` user's rights (``ensure_database``: each cluster's slurmdbd has its own, so
one cluster's QoS and associations never reach another's), and stopping both.
Every daemon it starts carries ``layout.shared_marker`` as ``$DETHPC_DEVCLUSTER_OWNER``.
Must not: start or stop any cluster's Slurm daemons (``daemons``), or stop a munged or
MariaDB the dev cluster did not start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import dethpc.devcluster.procs as procs
from dethpc.common.runner import CommandRunner
from dethpc.devcluster.layout import OWNER_ENV, DevClusterLayout
from dethpc.devcluster.readiness import MUNGE_RUN, Readiness, munged_pid, wait_until


class SharedServices:
    """munged and MariaDB, as ``layout`` (any cluster's) places them."""

    def __init__(self, layout: DevClusterLayout, runner: CommandRunner) -> None:
        self.layout, self.runner = layout, runner
        self.env = {**os.environ, OWNER_ENV: layout.shared_marker}
        self.daemon_runner = CommandRunner(timeout=60.0, retries=0, env=self.env)

    def ensure_munged(self) -> None:
        readiness = Readiness(self.layout, self.runner)
        if readiness.munge_ok():
            return
        pid, _ = munged_pid(self.layout)
        if pid:  # running but not answering: replace it
            procs.stop(pid, "munged", timeout=5)
        MUNGE_RUN.mkdir(parents=True, exist_ok=True)
        shutil.chown(MUNGE_RUN, "munge", "munge")
        MUNGE_RUN.chmod(0o755)
        self.daemon_runner.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged", "--force"])
        wait_until("munged to answer `munge -n | unmunge`", readiness.munge_ok, 20,
                   log=Path("/var/log/munge/munged.log"))
        started = procs.read_pid(MUNGE_RUN / "munged.pid")
        if started:
            self.layout.pid_file("munged").write_text(f"{started}\n")

    # MariaDB: a private instance (own data dir, socket and port) so that a system
    # MariaDB is never touched and `down` can stop ours without asking.
    def _client(self, program: str) -> list[str]:
        return [program, "--no-defaults", f"--socket={self.layout.mysql_socket}", "-u", "root"]

    def mariadb_ok(self) -> bool:
        res = self.runner.run([*self._client("mariadb-admin"), "ping"],
                              check=False, retry=False, timeout=10)
        return res.returncode == 0

    def ensure_mariadb(self) -> None:
        lay = self.layout
        pid = procs.running_pid(lay.pid_file("mariadbd"), "mariadbd")
        if pid and self.mariadb_ok():
            return
        if pid:
            procs.stop(pid, "mariadbd", timeout=30)
        if not (lay.mysql_dir / "mysql").is_dir():
            self.runner.run(["mariadb-install-db", "--no-defaults", "--user=mysql",
                             f"--datadir={lay.mysql_dir}", "--skip-test-db",
                             "--auth-root-authentication-method=socket"], timeout=300)
        log = lay.mariadb_log
        argv = ["/usr/sbin/mariadbd", "--no-defaults", "--user=mysql",
                f"--datadir={lay.mysql_dir}", f"--socket={lay.mysql_socket}",
                f"--pid-file={lay.mysql_run_dir / 'mariadbd.pid'}", f"--log-error={log}",
                "--bind-address=127.0.0.1", f"--port={lay.db_port}", "--skip-name-resolve",
                "--innodb-buffer-pool-size=128M", "--innodb-lock-wait-timeout=900"]
        # mariadbd does not fork: run it in its own session, detached from us.
        with open(os.devnull, "rb") as devnull, log.open("ab") as out:
            proc = subprocess.Popen(  # noqa: S603 - fixed argv
                argv, stdin=devnull, stdout=out, stderr=out, start_new_session=True,
                env=self.env, close_fds=True,
            )
        # Our own record (mariadbd's pid file is not readable by other users).
        lay.pid_file("mariadbd").write_text(f"{proc.pid}\n")
        wait_until("MariaDB to answer ping", self.mariadb_ok, 60, log=log,
                   died=lambda: proc.poll() is not None)

    def ensure_database(self, password: str) -> None:
        """User ``slurm`` (with ``password``) and this cluster's database, with its rights."""
        db = self.layout.db_name
        sql = (
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
            f"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
            f"CREATE DATABASE IF NOT EXISTS {db};"
            f"GRANT ALL ON {db}.* TO 'slurm'@'127.0.0.1';"
            "FLUSH PRIVILEGES;"
        )
        self.runner.run([*self._client("mariadb"), "-e", sql])

    def stop(self) -> list[str]:
        """Stop MariaDB and (when a dev cluster started it) munged; sweep what carries the
        shared marker. Call only when no cluster's slurmdbd still needs them."""
        stopped: list[str] = []
        pid = procs.running_pid(self.layout.pid_file("mariadbd"), "mariadbd")
        if pid:
            procs.stop(pid, "mariadbd", timeout=60.0)
            stopped.append("mariadbd")
        record = self.layout.pid_file("munged")
        pid = procs.running_pid(record, "munged")
        if pid:
            procs.stop(pid, "munged", timeout=10)
            stopped.append("munged")
        record.unlink(missing_ok=True)
        found = procs.marked_processes(OWNER_ENV, self.layout.shared_marker)
        for pid, name in found.items():
            procs.terminate(pid, name)
        for pid in procs.wait_gone(list(found), found, 5.0):
            procs.kill(pid, found[pid])
        return stopped + [f"{name} (leftover)" for name in sorted(set(found.values()))]
