"""Non-root users of the dev cluster, for tests of per-user limits.

Owns: ``ensure_user`` -- a Unix user (created with ``useradd`` when missing)
with an association in the dev cluster's accounting (by default the site's
test user ``dethpc-user`` in account ``ml-team``, whose default QoS is the
limited one) -- and ``user_dir``, a directory that user owns for a test's files.
Root may be exempt from limits, so limit tests submit as this user
(``runuser -u <name> -- sbatch ...``).
Must not: be used at run time by the library (it needs root and the dev cluster).
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dethpc.common.errors import CommandError, DethpcError
from dethpc.devcluster.cluster import DevCluster
from dethpc.devcluster.host import ensure_unix_user


@dataclass(frozen=True)
class ClusterUser:
    name: str
    uid: int
    gid: int
    account: str

    def as_user(self, argv: list[str]) -> list[str]:
        """``argv`` run as this user (from root)."""
        return ["runuser", "-u", self.name, "--", *argv]


def ensure_user(name: str | None = None, cluster: DevCluster | None = None) -> ClusterUser:
    """The Unix user ``name`` (default: the site's test user), created when missing, with
    its association (account ``site.test_user_account``) in the dev cluster's records.
    Idempotent and safe when several processes call it at once."""
    if os.geteuid() != 0:
        raise DethpcError("ensure_user needs root (it runs useradd and sacctmgr)")
    cluster = cluster or DevCluster()
    site = cluster.layout.site
    name = name or site.test_user
    ensure_unix_user(cluster.runner, name)
    try:
        cluster.apply_accounting([], test_user=name)
    except CommandError:
        # another process added the same records between our read and our add
        cluster.apply_accounting([], test_user=name)
    entry = pwd.getpwnam(name)
    return ClusterUser(name, entry.pw_uid, entry.pw_gid, site.test_user_account)


def user_dir(user: ClusterUser, parent: Path | None = None) -> Path:
    """A new directory owned by ``user`` (mode 755) under ``parent`` (default: the
    system temp dir; pytest's ``tmp_path`` lies under a root-only directory, which a
    job running as ``user`` cannot enter). The caller removes it."""
    path = Path(tempfile.mkdtemp(prefix=f"dethpc-{user.name}-", dir=parent))
    shutil.chown(path, user.uid, user.gid)
    path.chmod(0o755)
    return path


