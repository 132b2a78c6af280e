"""Where the cluster config file is looked for.

Owns: the lookup order of the cluster config file (``find_cluster_config``: argument,
``$DETHPC_CLUSTER_CONFIG``, the user's ``$XDG_CONFIG_HOME/dethpc/cluster.yaml``, the
site's ``/etc/dethpc/cluster.yaml``) and those names. ``dethpc.config.cluster`` loads what
it finds; the read commands' saved copy of the config (``dethpc.surfaces.cli.clustercache``)
keys on it without importing YAML or the parsers (issue 47).
Must not: read or parse the file, or import more than the standard library.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "DETHPC_CLUSTER_CONFIG"
SYSTEM_PATH = Path("/etc/dethpc/cluster.yaml")


def user_config_path() -> Path:
    """The user's own cluster config: ``$XDG_CONFIG_HOME/dethpc/cluster.yaml``
    (``~/.config/dethpc/cluster.yaml``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "dethpc" / "cluster.yaml"


def find_cluster_config(path: str | Path | None = None) -> Path | None:
    """The file to read, or None (detection, then the built-in defaults)."""
    if path is not None:
        return Path(path).expanduser()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    for candidate in (user_config_path(), SYSTEM_PATH):
        if candidate.is_file():
            return candidate
    return None
