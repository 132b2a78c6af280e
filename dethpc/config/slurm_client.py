"""Which Slurm client a process runs: the cluster config's ``slurm_bin``/``slurm_conf``
made into environment variables.

Owns: ``client_env`` (``PATH`` with ``slurm_bin`` first and ``SLURM_CONF``: what a site's
``module load slurm`` sets) and ``path_with_first``. ``dethpc.config.cluster
.slurm_client_env`` applies it to a ``ClusterConfig``; ``dethpc sbatch``'s light path to
the saved copy of those two values (``dethpc.surfaces.sbatchwrap.site``).
Must not: import anything but the standard library (the light paths use it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def path_with_first(first: list[str], path: str) -> str:
    """``path`` (a ``$PATH``) with the directories ``first`` at its front, in that order,
    each once (the same directory further on is dropped, as are empty entries)."""
    rest = [d for d in path.split(os.pathsep) if d and d not in first]
    return os.pathsep.join([*first, *rest])


def client_env(slurm_bin: str | None, slurm_conf: str | None,
               environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to set so that the Slurm commands dethpc runs (and its jobs, which
    inherit the submitting process's environment) are the cluster config's: ``PATH``
    with ``slurm_bin`` first and ``SLURM_CONF``. Empty when the config names neither
    or ``environ`` already says so."""
    out: dict[str, str] = {}
    if slurm_bin is not None:
        path = environ.get("PATH", os.defpath)
        if path.split(os.pathsep)[0] != slurm_bin:
            out["PATH"] = path_with_first([slurm_bin], path)
    if slurm_conf is not None and environ.get("SLURM_CONF") != slurm_conf:
        out["SLURM_CONF"] = slurm_conf
    return out
