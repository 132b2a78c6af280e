"""Apptainer/Singularity wrapping of a trial's command.

Owns: the ``exec`` argv (``--nv`` on GPU pools, ``--bind`` for the run directory,
the site's binds and the config's bind_mounts), the SIF cache path of an image on
shared storage and the pull-once-under-a-lock rule (``ensure_sif``).
Environment: ``exec_argv`` adds no ``--env``/``--cleanenv``; the job script's
``export``s reach the training process because both runtimes pass the host
environment into the container by default (an image's ``%environment`` may
override a variable of the same name; ``PATH`` is the image's own).
Must not: decide whether a job uses a container (the caller asks when
``environment.image`` is set and the site's runtime is not ``none``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
from collections.abc import Sequence
from pathlib import Path

from dethpc.config.model import BindMount, ContainerSettings
from dethpc.errors import CommandError, SubmitError
from dethpc.runner import CommandRunner

#: a pull of a large image over a slow registry link may take this long
PULL_TIMEOUT_S = 3600.0
DEFAULT_SIF_CACHE = Path("~/.dethpc/sif")


def _cache(settings: ContainerSettings) -> Path:
    return settings.sif_cache or DEFAULT_SIF_CACHE.expanduser()


def _is_local_sif(image: str) -> bool:
    return image.endswith(".sif") and "://" not in image


def _require_runtime(settings: ContainerSettings) -> None:
    if settings.runtime == "none":
        raise SubmitError("environment.image is set but the cluster has no container "
                          "runtime (containers.runtime: none)")


def sif_path(cache: Path, image: str) -> Path:
    """Where the SIF of ``image`` lives in the shared cache (a local .sif is used as is)."""
    if _is_local_sif(image):
        return Path(image)
    digest = hashlib.sha256(image.encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in image)[-60:]
    return cache / f"{safe}-{digest}.sif"


def _bind_path(path: str, what: str) -> str:
    """``path`` for a ``--bind`` spec, which splits on ',' (several binds) and ':'
    (source:destination:options) and has no escape for either."""
    bad = sorted({c for c in path if c in ",:"})
    if bad:
        raise SubmitError(f"{what} {path!r} contains {' and '.join(map(repr, bad))}, which "
                          "apptainer/singularity --bind cannot express; use a path without it")
    return path


def exec_argv(settings: ContainerSettings, image: str, argv: Sequence[str], *,
              binds: Sequence[str] = (), mounts: Sequence[BindMount] = (),
              gpu: bool = False) -> list[str]:
    """``<runtime> exec [--nv] --bind ... <sif> argv...`` (pure).

    ``settings.binds`` are the site's bind specs, passed as written; ``binds`` are
    host paths bound at the same path; ``mounts`` are the config's bind_mounts.
    """
    _require_runtime(settings)
    out = [settings.runtime, "exec"]
    if gpu:
        out.append("--nv")
    for b in settings.binds:
        out += ["--bind", b]
    for b in binds:
        out += ["--bind", _bind_path(b, "bind path")]
    for i, m in enumerate(mounts):
        host = _bind_path(m.host_path, f"bind_mounts[{i}].host_path")
        inside = _bind_path(m.container_path, f"bind_mounts[{i}].container_path")
        out += ["--bind", f"{host}:{inside}:{'ro' if m.read_only else 'rw'}"]
    out.append(str(sif_path(_cache(settings), image)))
    return out + list(argv)


def ensure_sif(settings: ContainerSettings, image: str, runner: CommandRunner) -> Path:
    """The SIF of ``image``, pulled into the shared cache once.

    Concurrent callers (threads, processes, hosts sharing the cache through a file
    system whose ``flock`` is coherent, as NFSv4 and Lustre are) serialize on a lock
    file next to the SIF; the first pulls, the others find the SIF when they get
    the lock. The pull writes a caller-private partial file renamed into place, so
    the cache never holds a truncated SIF; a failed pull removes it and raises
    ``SubmitError`` with the runtime's own message.
    """
    _require_runtime(settings)
    cache = _cache(settings)
    target = sif_path(cache, image)
    if _is_local_sif(image):
        if not target.is_file():
            raise SubmitError(f"environment.image: SIF file {image!r} does not exist")
        return target
    if target.is_file():
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SubmitError(f"cannot create the SIF cache {cache} "
                          f"(containers.sif_cache): {exc}") from exc
    with open(target.with_name(target.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():  # pulled by whoever held the lock before us
            return target
        for stale in cache.glob(f".{target.name}.*.partial"):  # from a killed puller
            stale.unlink(missing_ok=True)
        partial = cache / f".{target.name}.{socket.gethostname()}.{os.getpid()}.partial"
        uri = image if "://" in image else f"docker://{image}"
        try:
            runner.run([settings.runtime, "pull", "--force", str(partial), uri],
                       timeout=PULL_TIMEOUT_S)
            if not partial.is_file():
                raise SubmitError(f"{settings.runtime} pull of {uri} succeeded but wrote "
                                  f"no file at {partial}")
            partial.rename(target)
        except (CommandError, OSError) as exc:
            raise SubmitError(f"cannot pull image {image!r} into the SIF cache {cache}: "
                              f"{exc}") from exc
        finally:
            partial.unlink(missing_ok=True)
    return target
