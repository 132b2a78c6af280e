"""Apptainer/Singularity wrapping of a trial's command.

Owns: the ``exec`` argv (``--nv`` on GPU pools, ``--bind`` for the run directory,
the context and the config's bind_mounts, ``--env`` passing), the SIF cache path
of an image on shared storage and the pull-once-under-a-lock rule.
Must not: decide whether a job uses a container (the caller asks when
``environment.image`` is set and the site's runtime is not ``none``).
"""

from __future__ import annotations

import fcntl
import hashlib
from collections.abc import Sequence
from pathlib import Path

from dethpc.config.model import BindMount, ContainerSettings
from dethpc.errors import SubmitError
from dethpc.runner import CommandRunner


def sif_path(cache: Path, image: str) -> Path:
    """Where the SIF of ``image`` lives in the shared cache (a local .sif is used as is)."""
    if image.endswith(".sif") and "://" not in image:
        return Path(image)
    digest = hashlib.sha256(image.encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in image)[-60:]
    return cache / f"{safe}-{digest}.sif"


def exec_argv(settings: ContainerSettings, image: str, argv: Sequence[str], *,
              binds: Sequence[str] = (), mounts: Sequence[BindMount] = (),
              gpu: bool = False) -> list[str]:
    """``apptainer exec [--nv] --bind ... <sif> argv...`` (pure)."""
    if settings.runtime == "none":
        raise SubmitError("environment.image is set but the cluster has no container "
                          "runtime (containers.runtime: none)")
    cache = settings.sif_cache or Path("~/.dethpc/sif").expanduser()
    out = [settings.runtime, "exec"]
    if gpu:
        out.append("--nv")
    for b in [*settings.binds, *binds]:
        out += ["--bind", b]
    for m in mounts:
        out += ["--bind", f"{m.host_path}:{m.container_path}:{'ro' if m.read_only else 'rw'}"]
    out.append(str(sif_path(cache, image)))
    return out + list(argv)


def ensure_sif(settings: ContainerSettings, image: str, runner: CommandRunner) -> Path:
    """Pull ``image`` into the shared SIF cache once; concurrent callers wait on a lock."""
    cache = settings.sif_cache or Path("~/.dethpc/sif").expanduser()
    target = sif_path(cache, image)
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".pull.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            tmp = target.with_suffix(".sif.partial")
            uri = image if "://" in image else f"docker://{image}"
            runner.run([settings.runtime, "pull", "--force", str(tmp), uri], timeout=3600)
            tmp.rename(target)
    return target
