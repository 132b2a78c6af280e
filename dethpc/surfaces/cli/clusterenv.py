"""The effective cluster config of a CLI process.

Owns: ``effective_cluster(path)``: the file's config; with none anywhere, what Slurm's
answers imply on a login node (``slurm_detect``: one probe, cached in ``$DETHPC_HOME``),
else local. Its ``slurm_bin``/``slurm_conf`` are put into this process's environment, as a
site's ``module load slurm`` would: every Slurm command dethpc runs, the daemon it starts
and the jobs it submits (which inherit the environment) use them.
Must not: import typer or the ORM (the read path, ``dethpc.surfaces.cli.fastread``, uses it).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dethpc.config.model import ClusterConfig


def effective_cluster(path: str | None) -> ClusterConfig:
    from dethpc.backends.slurm_detect import detect
    from dethpc.common.paths import dethpc_home
    from dethpc.config.cluster import load_cluster_config, slurm_client_env

    cfg = load_cluster_config(path, detect=lambda: detect(dethpc_home(), say=_say))
    os.environ.update(slurm_client_env(cfg, os.environ))
    return cfg


def _say(text: str) -> None:
    """What detection says, on stderr as the CLI says it (rich: imported when said)."""
    from dethpc.surfaces.cli.output import err_console

    err_console.print(text, markup=False)
