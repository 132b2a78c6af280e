"""The config files of one dev cluster, on disk.

Owns: ``ConfigFiles`` -- the accounting database's password (made once, kept in the
shared directory: every cluster's slurmdbd logs in to the one MariaDB as ``slurm``),
writing the rendered slurm.conf, gres.conf and slurmdbd.conf (only when their text
changed; a file not written by the dev cluster is never overwritten without ``force``)
and telling whether the files on disk are what ``up`` would write now.
Must not: render the text (``layout.render_configs``) or start, stop or signal daemons
(a changed file is reported to ``cluster``, which restarts what reads it).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from dethpc.common.errors import DethpcError
from dethpc.devcluster.layout import MARKER, DevClusterLayout, render_configs


class ConfigFiles:
    """slurm.conf, gres.conf and slurmdbd.conf of ``layout``'s cluster."""

    def __init__(self, layout: DevClusterLayout) -> None:
        self.layout = layout

    def db_password(self) -> str:
        """The password of MariaDB's ``slurm`` user (created on first use)."""
        path = self.layout.db_password_file
        if path.exists():
            return path.read_text().strip()
        password = secrets.token_hex(16)
        path.write_text(password + "\n")
        path.chmod(0o600)
        return password

    def stale(self) -> bool:
        """True when a config file on disk differs from what ``up`` would write now
        (then ``up`` must not take the fast path: the running daemons read old files)."""
        path = self.layout.db_password_file
        if not path.exists():
            return True
        for dest, text in render_configs(self.layout, path.read_text().strip()).items():
            if not dest.exists() or dest.read_text() != text:
                return True
        return False

    def write(self, password: str, force: bool) -> set[Path]:
        """Write the files whose text changed; return those written."""
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
