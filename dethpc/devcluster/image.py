"""The dev cluster's container image: Debian bookworm + /opt/dethpc-venv, run with Charliecloud.

Owns: the image's recipe (Debian packages, mirrors, the install script
``singularity/install-dethpc.sh`` shared with the Apptainer definition), the stamp
that says which inputs built an image (a hash of the install script, dethpc's source
and pyproject.toml, the torch version and the recipe), and building it:
``build_image`` (mmdebstrap into ``.NAME.partial-PID`` beside the destination, then a
rename, under a lock file), ``ensure_image`` (builds only when missing or stale; when
only dethpc's own source changed it refreshes a hard-linked copy of the current image
with the new dethpc wheel instead of building from scratch, see ``image_plan``) and
``image_path`` (``STATE_DIR/images/dethpc-bookworm``). ``ch_run_argv`` says how to run
a command in the image.
Must not: reach a container registry, let pip inside the image resolve anything from
an index (wheels come from a directory prepared on the host, see ``prepare_wheels``),
or start cluster daemons. Every external command goes through ``CommandRunner``.

The image is a Charliecloud directory image; its Python is ``IMAGE_PYTHON``::

    USER=root ch-run -b /tmp:/tmp IMAGE -- /opt/dethpc-venv/bin/python -c "import torch"
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import dethpc
from dethpc.common.flock import flocked
from dethpc.common.runner import CommandRunner
from dethpc.devcluster.layout import DevClusterLayout

IMAGE_NAME = "dethpc-bookworm"
#: the venv install-dethpc.sh creates in the image
IMAGE_VENV = "/opt/dethpc-venv"
IMAGE_PYTHON = f"{IMAGE_VENV}/bin/python"
TORCH_VERSION = "2.13.0"
SUITE = "bookworm"
MIRRORS: tuple[str, ...] = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
#: Debian packages of the image (minbase already has bash and coreutils; named anyway).
#: python3-venv: the venv; procps: ps/kill for the launchers' teardown; ca-certificates
#: for trial code that fetches over https.
PACKAGES: tuple[str, ...] = (
    "python3", "python3-venv", "bash", "coreutils", "procps", "ca-certificates",
)
#: host command -> the Debian package that provides it
HOST_TOOLS: Mapping[str, str] = {"mmdebstrap": "mmdebstrap", "ch-run": "charliecloud-runtime"}
#: the stamp, inside the image (so it is readable in the container too)
STAMP = Path("etc/dethpc-image.json")
INSTALL_SCRIPT = "install-dethpc.sh"
#: where the wheels and the script are copied in the new root during the build
IN_ROOT_DIR = "/tmp/dethpc-install"
BUILD_TIMEOUT_S = 1800.0


class ImageError(RuntimeError):
    """The image cannot be built here (missing tools, not root, a wrong torch wheel)."""


class ImagePlan(enum.Enum):
    """What ``ensure_image`` does with the image it finds."""

    #: the stamp matches the inputs: use it as it is
    REUSE = "reuse"
    #: only dethpc's own source changed: reinstall its wheel into a copy of the image
    REFRESH = "refresh"
    #: no image, or the base changed (dependencies, install script, recipe): mmdebstrap
    BUILD = "build"


@dataclass(frozen=True)
class ImageInfo:
    path: Path
    digest: str
    size_mb: int
    #: seconds the build of this image took (the one recorded in its stamp); for a
    #: refresh made by this call, the refresh's seconds
    build_seconds: float
    #: True when this call built or refreshed it, False when an up-to-date image was reused
    built: bool
    torch_version: str = TORCH_VERSION
    python: str = IMAGE_PYTHON
    #: what this call did
    plan: ImagePlan = ImagePlan.BUILD


# ----------------------------------------------------------------------- pure parts


def image_path(layout: DevClusterLayout | None = None) -> Path:
    """The cached image of this machine: ``STATE_DIR/images/dethpc-bookworm`` (the shared
    directory: every lane's cluster runs the same image)."""
    return (layout or DevClusterLayout()).shared / "images" / IMAGE_NAME


def recipe_settings(wheel_names: Sequence[str] = ()) -> dict[str, str]:
    """The non-file inputs of a build (part of the stamp's digest)."""
    settings = {
        "dethpc_version": dethpc.__version__,
        "torch_version": TORCH_VERSION,
        "suite": SUITE,
        "mirrors": "\n".join(MIRRORS),
        "packages": " ".join(PACKAGES),
        "venv": IMAGE_VENV,
    }
    if wheel_names:  # a caller-given wheel directory: its contents are an input too
        settings["wheels"] = "\n".join(sorted(wheel_names))
    return settings


def inputs_digest(files: Mapping[str, bytes], settings: Mapping[str, str]) -> str:
    """sha256 over the input files (by relative name) and the settings, order-independent."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(b"F\0" + name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    for key in sorted(settings):
        h.update(b"S\0" + key.encode() + b"\0" + settings[key].encode() + b"\0")
    return h.hexdigest()


#: input files that only the dethpc wheel carries: a change to them alone is a refresh
OWN_SOURCE_PREFIXES: tuple[str, ...] = ("dethpc/", "sbatch_templates/")


def base_files(files: Mapping[str, bytes]) -> dict[str, bytes]:
    """The inputs that decide everything in the image except dethpc's own wheel: the install
    script and pyproject.toml (the dependencies), without dethpc/ and its templates."""
    return {k: v for k, v in files.items() if not k.startswith(OWN_SOURCE_PREFIXES)}


def image_plan(stamp: Mapping[str, Any] | None, digest: str, base_digest: str, *,
               rebuild: bool = False, can_refresh: bool = True) -> ImagePlan:
    """``REUSE`` a fresh image, ``REFRESH`` one whose base (``base_digest``, see
    ``base_files``) is unchanged, else ``BUILD``. ``rebuild`` forces a build;
    ``can_refresh`` False (a caller-given wheel directory, no source checkout) too."""
    if rebuild or stamp is None:
        return ImagePlan.BUILD
    if stale_reason(stamp, digest) is None:
        return ImagePlan.REUSE
    if can_refresh and stamp.get("base_digest") == base_digest:
        return ImagePlan.REFRESH
    return ImagePlan.BUILD


def stale_reason(stamp: Mapping[str, Any] | None, digest: str) -> str | None:
    """Why an image with ``stamp`` must be rebuilt for inputs ``digest``; None: it is fresh."""
    if stamp is None:
        return "no image (or no stamp in it)"
    if stamp.get("digest") != digest:
        return f"inputs changed (image {str(stamp.get('digest'))[:12]}, now {digest[:12]})"
    return None


def make_stamp(digest: str, settings: Mapping[str, str], *, size_mb: int,
               build_seconds: float, built_at: float, base_digest: str = "",
               refresh_seconds: float | None = None) -> dict[str, Any]:
    """The stamp of an image: ``build_seconds`` is its base's mmdebstrap build,
    ``refresh_seconds`` (refreshed images only) the wheel reinstall that made it."""
    stamp: dict[str, Any] = {
        "digest": digest, "base_digest": base_digest, "settings": dict(settings),
        "size_mb": size_mb, "build_seconds": round(build_seconds, 1), "built_at": built_at,
        "python": IMAGE_PYTHON}
    if refresh_seconds is not None:
        stamp["refresh_seconds"] = round(refresh_seconds, 1)
    return stamp


def refresh_argv(image: Path, wheel_in_image: str) -> list[str]:
    """Reinstall dethpc's wheel (no dependencies, no index) in the image's venv, as root."""
    return ["chroot", str(image), "env", "PIP_CONFIG_FILE=/dev/null", "PIP_NO_CACHE_DIR=1",
            "PIP_DISABLE_PIP_VERSION_CHECK=1", IMAGE_PYTHON, "-m", "pip", "install",
            "--quiet", "--no-index", "--no-deps", "--force-reinstall", wheel_in_image]


def is_cpu_torch_wheel(url: str) -> bool:
    """Whether ``url`` names torch TORCH_VERSION's CPU-only wheel (local label ``+cpu``)."""
    name = unquote(Path(urlparse(url).path).name)
    parts = name.split("-")
    return len(parts) >= 2 and parts[0] == "torch" and parts[1] == f"{TORCH_VERSION}+cpu"


def mmdebstrap_argv(target: Path, wheels: Path, script: Path) -> list[str]:
    """mmdebstrap building the image into ``target`` and running ``script`` in its chroot."""
    q = shlex.quote
    inner = IN_ROOT_DIR
    hooks = [
        f'mkdir -p "$1"{q(inner)}',
        f"copy-in {q(str(wheels))} {q(str(script))} {q(inner)}",
        f'chroot "$1" sh {q(inner + "/" + INSTALL_SCRIPT)} {q(inner + "/" + wheels.name)} '
        f"{q(IMAGE_VENV)}",
        f'rm -rf "$1"{q(inner)}',
        # ch-run binds the host's /etc/hosts and /etc/resolv.conf only onto existing files
        'touch "$1/etc/hosts" "$1/etc/resolv.conf"',
    ]
    argv = ["mmdebstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES)]
    for hook in hooks:
        argv.append(f"--customize-hook={hook}")
    return [*argv, SUITE, str(target), *MIRRORS]


def ch_run_argv(image: Path, argv: Sequence[str],
                binds: Sequence[str] = ("/tmp:/tmp",)) -> list[str]:
    """``ch-run`` running ``argv`` in ``image`` (needs ``$USER`` set in its environment)."""
    out = ["ch-run"]
    for bind in binds:
        out += ["-b", bind]
    return [*out, str(image), "--", *argv]


# ----------------------------------------------------------------------- file inputs


def source_root() -> Path | None:
    """The dethpc checkout (with pyproject.toml) this module runs from, or None if installed."""
    root = Path(dethpc.__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def install_script() -> Path:
    """singularity/install-dethpc.sh of the checkout, else the copy inside the wheel."""
    root = source_root()
    for base in ([root / "singularity"] if root else []) + [
            Path(dethpc.__file__).resolve().parent / "singularity"]:
        if (base / INSTALL_SCRIPT).is_file():
            return base / INSTALL_SCRIPT
    raise ImageError(f"{INSTALL_SCRIPT} not found beside dethpc")


def _tree_files(base: Path, prefix: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for path in sorted(base.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            out[f"{prefix}/{path.relative_to(base).as_posix()}"] = path.read_bytes()
    return out


def input_files() -> dict[str, bytes]:
    """The files whose content decides the image: the install script, dethpc/, templates,
    pyproject.toml (relative name -> bytes)."""
    pkg = Path(dethpc.__file__).resolve().parent
    files = {INSTALL_SCRIPT: install_script().read_bytes(), **_tree_files(pkg, "dethpc")}
    root = source_root()
    if root is not None:
        files["pyproject.toml"] = (root / "pyproject.toml").read_bytes()
        if (root / "sbatch_templates").is_dir():
            files.update(_tree_files(root / "sbatch_templates", "sbatch_templates"))
    return files


def read_stamp(image: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((image / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class Inputs:
    """What the current inputs hash to: the whole (``digest``) and the base an image
    can be refreshed from (``base_digest``), with the recipe's ``settings``."""

    digest: str
    base_digest: str
    settings: dict[str, str]


def current_inputs(wheels: Path | None = None) -> Inputs:
    """The input files read once, both digests computed from them."""
    names = sorted(p.name for p in wheels.iterdir()) if wheels is not None else []
    settings = recipe_settings(names)
    files = input_files()
    return Inputs(inputs_digest(files, settings), inputs_digest(base_files(files), settings),
                  settings)


def current_digest(wheels: Path | None = None) -> tuple[str, dict[str, str]]:
    inputs = current_inputs(wheels)
    return inputs.digest, inputs.settings


def current_base_digest(wheels: Path | None = None) -> str:
    return current_inputs(wheels).base_digest


# ----------------------------------------------------------------------- side effects


def ensure_host_tools(runner: CommandRunner) -> None:
    """Install mmdebstrap and charliecloud-runtime with apt-get when missing (root only)."""
    missing = sorted({pkg for tool, pkg in HOST_TOOLS.items() if shutil.which(tool) is None})
    if not missing:
        return
    if os.geteuid() != 0:
        raise ImageError(f"missing Debian packages {missing}; install them as root "
                         f"(apt-get install {' '.join(missing)})")
    apt = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]
    install = [*apt, "install", "-y", "--no-install-recommends", *missing]
    if runner.run(install, check=False, timeout=900, retry=False).returncode != 0:
        runner.run([*apt, "update", "-qq"], timeout=900, retry=False)  # fresh package lists
        runner.run(install, timeout=900, retry=False)


def prepare_wheels(wheels: Path, runner: CommandRunner) -> None:
    """Fill ``wheels`` with dethpc's wheel, its dependencies and torch's CPU wheel (host pip).

    Refuses before downloading anything when pip would pick a torch wheel that is
    not the CPU build (the CUDA one pulls gigabytes of nvidia wheels).
    """
    root = source_root()
    if root is None:
        raise ImageError("dethpc is not run from a source checkout; pass a wheel directory")
    pip = [sys.executable, "-m", "pip"]
    report = runner.run([*pip, "install", "--dry-run", "--ignore-installed", "--no-deps",
                         "--quiet", "--report", "-", f"torch=={TORCH_VERSION}"],
                        timeout=300, retry=False)
    urls = [i.get("download_info", {}).get("url", "")
            for i in json.loads(report.stdout).get("install", [])]
    if not urls or not is_cpu_torch_wheel(urls[0]):
        raise ImageError(f"pip would install torch from {urls or 'nowhere'}, not the CPU wheel "
                         f"torch-{TORCH_VERSION}+cpu; give pip a find-links holding it")
    wheels.mkdir(parents=True, exist_ok=True)
    runner.run([*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(root)],
               timeout=600, retry=False)
    runner.run([*pip, "download", "--quiet", "--only-binary=:all:", "--dest", str(wheels),
                "--find-links", str(wheels), f"dethpc[torch]=={dethpc.__version__}",
                f"torch=={TORCH_VERSION}"], timeout=1800, retry=False)
    cuda = sorted(p.name for p in wheels.glob("nvidia_*"))
    if cuda:
        raise ImageError(f"CUDA wheels were resolved ({cuda[:3]}...); the image is CPU-only")


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    lock.parent.mkdir(parents=True, exist_ok=True)
    with flocked(lock):
        yield


def _lock_file(dest: Path) -> Path:
    return dest.parent / f".{dest.name}.lock"


def _clear_leftovers(dest: Path) -> None:
    """Remove partial/old trees of crashed builds (call with the lock held)."""
    for pattern in (f".{dest.name}.partial-*", f".{dest.name}.old-*", f".{dest.name}.wheels-*"):
        for path in dest.parent.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)


def _size_mb(path: Path, runner: CommandRunner) -> int:
    out = runner.run(["du", "-sm", str(path)], timeout=300, retry=False).stdout
    return int(out.split()[0])


def _build_locked(dest: Path, runner: CommandRunner, wheels: Path | None,
                  inputs: Inputs | None = None) -> ImageInfo:
    ensure_host_tools(runner)
    _clear_leftovers(dest)
    pid = os.getpid()
    partial = dest.parent / f".{dest.name}.partial-{pid}"
    own_wheels = dest.parent / f".{dest.name}.wheels-{pid}" / "wheels"
    started = time.monotonic()
    try:
        if wheels is None:
            prepare_wheels(own_wheels, runner)
        inputs = inputs or current_inputs(wheels)
        runner.run(mmdebstrap_argv(partial, wheels or own_wheels, install_script()),
                   timeout=BUILD_TIMEOUT_S, retry=False)
        seconds = time.monotonic() - started
        size = _size_mb(partial, runner)
        stamp = make_stamp(inputs.digest, inputs.settings, size_mb=size,
                           build_seconds=seconds, built_at=time.time(),
                           base_digest=inputs.base_digest)
        _install(partial, stamp, dest)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(own_wheels.parent, ignore_errors=True)
    return ImageInfo(dest, inputs.digest, size, seconds, built=True)


def _install(partial: Path, stamp: Mapping[str, Any], dest: Path) -> None:
    """Write ``stamp`` into ``partial`` (a new file: a refreshed copy shares its inodes
    with the old image) and rename it to ``dest``, the old image out of the way first."""
    (partial / STAMP).unlink(missing_ok=True)
    (partial / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    old = dest.parent / f".{dest.name}.old-{os.getpid()}"
    if dest.exists():
        dest.rename(old)
    partial.rename(dest)
    shutil.rmtree(old, ignore_errors=True)


def _refresh_locked(dest: Path, runner: CommandRunner, stamp: Mapping[str, Any],
                    inputs: Inputs) -> ImageInfo:
    """Only dethpc's source changed: hard-link a copy of ``dest`` (seconds, not the
    mmdebstrap build's minutes), reinstall the checkout's wheel in it, check that
    dethpc and torch import, and put it in place, stamped with ``inputs`` (read before
    the wheel was built). pip unlinks the files it replaces, so the old image's inodes
    are never written."""
    root = source_root()
    if root is None:
        raise ImageError("dethpc is not run from a source checkout; cannot refresh")
    _clear_leftovers(dest)
    pid = os.getpid()
    partial = dest.parent / f".{dest.name}.partial-{pid}"
    wheels = dest.parent / f".{dest.name}.wheels-{pid}"
    started = time.monotonic()
    try:
        runner.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(wheels), str(root)], timeout=600, retry=False)
        wheel = next(iter(sorted(wheels.glob("dethpc-*.whl"))), None)
        if wheel is None:
            raise ImageError(f"pip wheel wrote no dethpc wheel into {wheels}")
        runner.run(["cp", "-al", str(dest), str(partial)], timeout=600, retry=False)
        inner = partial / IN_ROOT_DIR.lstrip("/")
        inner.mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, inner / wheel.name)
        runner.run(refresh_argv(partial, f"{IN_ROOT_DIR}/{wheel.name}"),
                   timeout=600, retry=False)
        runner.run(["chroot", str(partial), IMAGE_PYTHON, "-c", "import dethpc, torch"],
                   timeout=300, retry=False)
        shutil.rmtree(inner)
        seconds = time.monotonic() - started
        size = int(stamp.get("size_mb", 0))
        _install(partial, make_stamp(
            inputs.digest, inputs.settings, size_mb=size,
            build_seconds=float(stamp.get("build_seconds", 0)), built_at=time.time(),
            base_digest=inputs.base_digest, refresh_seconds=seconds), dest)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(wheels, ignore_errors=True)
    return ImageInfo(dest, inputs.digest, size, seconds, built=True, plan=ImagePlan.REFRESH)


def build_image(dest: Path, runner: CommandRunner, *, wheels: Path | None = None) -> ImageInfo:
    """Build the image at ``dest`` now (replacing any), atomically and under a lock.

    ``wheels``: a directory holding every wheel (dethpc's too); None prepares one with
    the host's pip (``prepare_wheels``).
    """
    dest = Path(dest)
    with _locked(_lock_file(dest)):
        return _build_locked(dest, runner, wheels)


def ensure_image(dest: Path | None = None, runner: CommandRunner | None = None, *,
                 wheels: Path | None = None, rebuild: bool = False) -> ImageInfo:
    """The image at ``dest`` (default ``image_path()``), built only when missing or stale."""
    dest = Path(dest) if dest is not None else image_path()
    runner = runner or CommandRunner()
    with _locked(_lock_file(dest)):
        inputs = current_inputs(wheels)
        stamp = read_stamp(dest)
        plan = image_plan(stamp, inputs.digest, inputs.base_digest, rebuild=rebuild,
                          can_refresh=wheels is None and source_root() is not None)
        if plan is ImagePlan.REUSE and stamp is not None:
            return ImageInfo(dest, inputs.digest, int(stamp.get("size_mb", 0)),
                             float(stamp.get("build_seconds", 0.0)), built=False,
                             plan=ImagePlan.REUSE)
        if plan is ImagePlan.REFRESH and stamp is not None:
            return _refresh_locked(dest, runner, stamp, inputs)
        return _build_locked(dest, runner, wheels, inputs)
