"""Where the user-level remote file is (docs/remote.md).

Owns: ``remote_file`` -- ``$DETHPC_REMOTE_CONFIG``, else
``$XDG_CONFIG_HOME/dethpc/remote.yaml`` (default ``~/.config/dethpc/remote.yaml``).
Must not: import anything but ``os``: ``dethpc --help`` asks it before answering from
its saved copy (``dethpc.surfaces.entry``), where every import shows.
"""

from __future__ import annotations

import os


def remote_file() -> str:
    """The path of the user-level remote file (which may not exist)."""
    named = os.environ.get("DETHPC_REMOTE_CONFIG")
    if named:
        return os.path.expanduser(named)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return os.path.join(base, "dethpc", "remote.yaml")
