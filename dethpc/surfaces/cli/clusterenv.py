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

from dethpc.config import load_cluster_config
from dethpc.config.model import ClusterConfig
from dethpc.surfaces.cli.output import err_console


def effective_cluster(path: str | None) -> ClusterConfig:
    from dethpc.backends.slurm_detect import detect
    from dethpc.common.paths import dethpc_home
    from dethpc.config.cluster import slurm_client_env

    cfg = load_cluster_config(path, detect=lambda: detect(
        dethpc_home(), say=lambda text: err_console.print(text, markup=False)))
    os.environ.update(slurm_client_env(cfg, os.environ))
    return cfg
