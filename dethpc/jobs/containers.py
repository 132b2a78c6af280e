"""Container runtimes: how a trial's command runs inside the experiment's image.

Owns: the runtimes (``RuntimeKind``, ``RuntimeTraits``: Apptainer and Singularity run a
SIF pulled into a shared cache, Charliecloud runs an image directory), the ``exec``
argv (``exec_argv``: ``--nv`` on GPU pools, ``--bind`` for the run directory, the
context, the site's binds and the config's bind_mounts, ``--cleanenv`` with the
variables dethpc passes explicitly, a private /tmp under ``containall``), the
environment passed (``passed_names``, ``PASS_ENV``: a small sh program run in each
task, as its values differ per task), where an image lives (``image_path``), the
pull-once-under-a-lock rule (``ensure_sif``) and the submit-time check
(``check_runtime``). docs/containers.md.
Must not: decide whether a job uses a container (the caller asks when
``environment.image`` is set and the site's runtime is not ``none``), or submit.
"""

from __future__ import annotations

import enum
import fcntl
import hashlib
import os
import re
import shutil
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dethpc.common.errors import CommandError, SubmitError
from dethpc.common.runner import CommandRunner
from dethpc.config.model import BindMount, ContainerSettings

#: a pull of a large image over a slow registry link may take this long
PULL_TIMEOUT_S = 3600.0
DEFAULT_SIF_CACHE = Path("~/.dethpc/sif")


class RuntimeKind(enum.Enum):
    NONE = "none"
    APPTAINER = "apptainer"
    SINGULARITY = "singularity"
    CHARLIECLOUD = "charliecloud"


@dataclass(frozen=True)
class RuntimeTraits:
    kind: RuntimeKind
    #: the program that starts a container
    program: str
    #: images become SIF files in the shared cache (``pull``); otherwise an image is an
    #: unpacked directory on shared storage, used as it is
    pulls: bool
    #: variables with this prefix reach a ``--cleanenv`` container (Apptainer's rule)
    env_prefix: str | None
    #: the flag that brings the host's NVIDIA driver in (None: the image must have it)
    gpu_flag: str | None


APPTAINER = RuntimeTraits(RuntimeKind.APPTAINER, "apptainer", True, "APPTAINERENV_", "--nv")
SINGULARITY = RuntimeTraits(RuntimeKind.SINGULARITY, "singularity", True, "SINGULARITYENV_",
                            "--nv")
CHARLIECLOUD = RuntimeTraits(RuntimeKind.CHARLIECLOUD, "ch-run", False, None, None)
_TRAITS = {t.kind: t for t in (APPTAINER, SINGULARITY, CHARLIECLOUD)}


def traits_of(settings: ContainerSettings) -> RuntimeTraits:
    _require_runtime(settings)
    return _TRAITS[RuntimeKind(settings.runtime)]


#: what ``cleanenv`` always passes: dethpc's contract, Determined's ``DET_*`` variables,
#: Slurm's per-task variables, the rendezvous of the launchers, NCCL/CUDA/GPU selection,
#: MPI/PMIx wiring, and the user's identity and locale (names, or ``PREFIX_*``)
PASSED = ("DETHPC_*", "DET_*", "SLURM_*", "SLURMD_*", "NCCL_*", "CUDA_*", "NVIDIA_*",
          "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "OMPI_*",
          "PMIX_*", "PMI_*", "UCX_*",
          "GLOO_*", "TORCH_*", "TORCHELASTIC_*", "OMP_NUM_THREADS", "MASTER_ADDR",
          "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
          "ROLE_RANK", "ROLE_WORLD_SIZE", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "HOME", "USER",
          "LOGNAME", "LANG", "LC_*", "TZ", "TERM")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")

#: Run in each task before the runtime (``sh -c PASS_ENV dethpc-pass-env RUNTIME...``):
#: sets ``$USER`` when the job lacks it (ch-run refuses to start without), makes the
#: task's private directory, writes the variables to pass (one ``NAME=value``
#: per line; a value over several lines is left out) and, for Apptainer/Singularity,
#: exports each as ``<PREFIX>NAME``; replaces ``@ENVFILE@``, ``@WORKDIR@`` and ``@CWD@``
#: in its arguments by that file, that directory and the task's working directory; then
#: execs the runtime (signals reach it and, through it, the training process).
PASS_ENV = r"""d="${TMPDIR:-/tmp}/dethpc-ct.${SLURM_JOB_ID:-0}.${SLURM_STEP_ID:-b}"
d="$d.${SLURM_PROCID:-0}.$$"
mkdir -p "$d/tmp" && : >"$d/env" || exit 125
[ -n "${USER:-}" ] || { USER=$(id -un) && export USER; }
for n in $(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' | sort -u); do
  case "$n" in {patterns}) ;; *) continue ;; esac
  v=$(printenv "$n") || continue
  case "$v" in *'
'*) continue ;; esac
  {export}printf '%s=%s\n' "$n" "$v" >>"$d/env"
done
for a in "$@"; do
  shift
  case "$a" in
    *@ENVFILE@*|*@WORKDIR@*|*@CWD@*)
      a=$(printf '%s' "$a" | sed -e "s|@ENVFILE@|$d/env|" -e "s|@WORKDIR@|$d|" \
        -e "s|@CWD@|$PWD|") ;;
  esac
  set -- "$@" "$a"
done
exec "$@"
"""  # noqa: S105 - a shell program, not a password


def passed_names(settings: ContainerSettings, config_names: Sequence[str] = ()) -> list[str]:
    """The variables a ``cleanenv`` container gets: ``PASSED``, the site's ``pass_env``
    and the experiment's own ``environment_variables`` (names)."""
    out: list[str] = []
    for name in (*PASSED, *settings.pass_env, *config_names):
        if _NAME.match(name) and name not in out:
            out.append(name)
    return out


def pass_env_argv(traits: RuntimeTraits, names: Sequence[str]) -> list[str]:
    export = (f'export "{traits.env_prefix}$n=$v"; ' if traits.env_prefix else "")
    program = PASS_ENV.replace("{patterns}", "|".join(names)).replace("{export}", export)
    return ["/bin/sh", "-c", program, "dethpc-pass-env"]


def sif_cache(settings: ContainerSettings) -> Path:
    """The site's SIF cache (``containers.sif_cache``, default ``~/.dethpc/sif``)."""
    return _cache(settings)


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


def image_path(settings: ContainerSettings, image: str) -> Path:
    """Where ``image`` is on the nodes: its SIF in the cache (a local ``.sif`` as is), or
    for Charliecloud the image directory itself."""
    if not traits_of(settings).pulls:
        return Path(image)
    return sif_path(_cache(settings), image)


def exec_argv(settings: ContainerSettings, image: str, argv: Sequence[str], *,
              binds: Sequence[str] = (), mounts: Sequence[BindMount] = (),
              gpu: bool = False, env_names: Sequence[str] = ()) -> list[str]:
    """The command that runs ``argv`` in ``image`` (pure).

    ``settings.binds`` are the site's bind specs, passed as written; ``binds`` are host
    paths bound at the same path; ``mounts`` are the config's bind_mounts;
    ``env_names`` the experiment's own variables (passed under ``cleanenv``).
    Apptainer/Singularity: ``<runtime> exec [--nv] [--cleanenv] [--containall --workdir
    DIR] --bind ... SIF argv``; Charliecloud: ``ch-run [--private-tmp] [--unset-env='*'
    --set-env=FILE] -b ... DIR -- argv``. Under ``cleanenv`` or ``containall`` the
    runtime is started by ``PASS_ENV`` (per-task values).
    """
    traits = traits_of(settings)
    specs = [*settings.binds, *(_bind_path(b, "bind path") for b in binds)]
    for i, m in enumerate(mounts):
        host = _bind_path(m.host_path, f"bind_mounts[{i}].host_path")
        inside = _bind_path(m.container_path, f"bind_mounts[{i}].container_path")
        specs.append(f"{host}:{inside}" + ("" if traits.kind == RuntimeKind.CHARLIECLOUD
                                           else f":{'ro' if m.read_only else 'rw'}"))
    if traits.kind == RuntimeKind.CHARLIECLOUD:
        out = [traits.program, "--cd=@CWD@"]   # ch-run starts in / otherwise
        if settings.containall:
            out.append("--private-tmp")
        if settings.cleanenv:
            out += ["--unset-env=*", "--env-no-expand", "--set-env=@ENVFILE@"]
        out += [f"--bind={spec}" for spec in specs]
        out += [str(image_path(settings, image)), "--", *argv]
    else:
        out = [traits.program, "exec"]
        if gpu and traits.gpu_flag:
            out.append(traits.gpu_flag)
        if settings.containall:
            out += ["--containall", "--workdir", "@WORKDIR@"]
        elif settings.cleanenv:
            out.append("--cleanenv")
        for spec in specs:
            out += ["--bind", spec]
        out += [str(image_path(settings, image)), *argv]
    if settings.cleanenv or settings.containall or traits.kind == RuntimeKind.CHARLIECLOUD:
        # (ch-run also needs $USER, which a batch job may lack: PASS_ENV sets it)
        return [*pass_env_argv(traits, passed_names(settings, env_names)), *out]
    return out


def bind_destinations(settings: ContainerSettings, binds: Sequence[str],
                      mounts: Sequence[BindMount]) -> list[str]:
    """Where the binds of a trial land inside the container."""
    out = [spec.split(":")[1] if ":" in spec else spec for spec in settings.binds]
    return [*out, *binds, *(m.container_path for m in mounts)]


def check_runtime(settings: ContainerSettings, image: str,
                  which: Callable[[str], str | None] = shutil.which,
                  destinations: Sequence[str] = ()) -> None:
    """At submit: the runtime is installed here (the login node starts or pulls with it)
    and an image that is not pulled exists; ``SubmitError`` naming the setting. For
    Charliecloud, whose images are read-only directories, every bind ``destinations``
    must exist in the image (or lie under /tmp, which ch-run shares or makes private)."""
    traits = traits_of(settings)
    if which(traits.program) is None:
        raise SubmitError(f"containers.runtime is {settings.runtime!r} but {traits.program!r} "
                          "is not on PATH here; install it (login and compute nodes) or set "
                          "containers.runtime to one that is installed")
    if not traits.pulls:
        path = Path(image)
        if not path.is_absolute() or not (path / "bin").is_dir():
            raise SubmitError(f"environment.image {image!r}: a {settings.runtime} image is an "
                              "unpacked image directory on shared storage (absolute path, "
                              "with bin/ in it); none is there")
        missing = [d for d in destinations if not Path(d).is_relative_to("/tmp")
                   and not (path / str(d).lstrip("/")).is_dir()]
        if missing:
            raise SubmitError(f"environment.image {image!r} has no directory for the bind "
                              f"destination(s) {', '.join(map(str, missing))}: a "
                              f"{settings.runtime} image is read-only, so ch-run cannot make "
                              "them; create them in the image (mkdir -p) or choose "
                              "destinations that exist (bind_mounts[].container_path, "
                              "runs_root, checkpoint_storage)")
    elif _is_local_sif(image) and not Path(image).is_file():
        raise SubmitError(f"environment.image: SIF file {image!r} does not exist")


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
