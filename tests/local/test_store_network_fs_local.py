"""A home on a real network filesystem (sshfs over FUSE from a private sshd on
127.0.0.1), the real mount table, the real CLI in subprocesses: the warning once on
stderr, ``--json`` stdout clean, ``config show-cluster`` naming ``fuse.sshfs``.

Skipped with the reason where sshfs, sshd or /dev/fuse is missing or not root: NFS
would be the usual case, but this sandbox's kernel has no ``nfs`` filesystem
(docs/admin.md#where-the-database-lives).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dethpc.store.location import WARNED_MARKER
from tests.conftest import in_ci
from tests.fixtures.mounts import sshfs, why_not_sshfs


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(why_not_sshfs() is not None and not in_ci(), reason=str(why_not_sshfs()))
def test_a_home_on_sshfs_is_warned_of_once(tmp_path: Path) -> None:
    with sshfs(tmp_path / "sshfs") as mnt:
        home = mnt / "home"
        home.mkdir()
        cluster = tmp_path / "cluster.yaml"
        cluster.write_text(yaml.safe_dump({"backend": "local", "runs_root": str(tmp_path)}))
        env = {**os.environ, "DETHPC_HOME": str(home), "DETHPC_CLUSTER_CONFIG": str(cluster)}
        first = _cli(env, "experiment", "list", "--json")
        assert first.returncode == 0, first.stderr
        assert json.loads(first.stdout) == []
        db = os.path.realpath(home / "dethpc.db")
        words = (f"dethpc: warning: the state database {home / 'dethpc.db'} is on fuse.sshfs "
                 f"(root@127.0.0.1:{tmp_path / 'sshfs' / 'export'} mounted at {mnt})")
        assert first.stderr.count(words) == 1, first.stderr
        assert (home / WARNED_MARKER).exists() and Path(db).exists()
        second = _cli(env, "experiment", "list", "--json")
        assert second.returncode == 0 and json.loads(second.stdout) == []
        assert "warning" not in second.stderr
        shown = _cli(env, "config", "show-cluster")
        assert (f"# store: SQLite file {home / 'dethpc.db'} on fuse.sshfs" in shown.stdout
                and "a network filesystem, unsafe for SQLite" in shown.stdout)
