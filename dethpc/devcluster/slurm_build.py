"""Build a Slurm release from its vendored source, once per machine.

Owns: finding a release's tarball (``third_party/slurm/`` of the checkout, or
``$DETHPC_SLURM_SOURCE_DIR``) and checking it against ``SHA256SUMS``; where its build
lives (``SHARED/slurm/<release>-<sha12>/``: keyed by the tarball's hash, so a new
tarball builds beside the old one and a machine builds each tarball once); the build
itself (Debian's build dependencies, ``configure``/``make``/``make install`` into that
prefix, a smoke test of the installed ``sbatch``) and the stamp written last, so that
an interrupted build is recognised and redone; and ``SlurmBuild``, what a cluster needs
to use it (its prefix, version, how long the build took).
Must not: write slurm.conf or start daemons (``cluster`` does), or touch Debian's
Slurm. Every external command goes through ``CommandRunner``.

Measured on the 2-core machines of this project: about 4 minutes (README of
third_party/slurm and docs/dev-cluster.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dethpc
from dethpc.common.errors import DethpcError
from dethpc.common.flock import flocked
from dethpc.common.jobenv import ENV_SLURM_SOURCE_DIR
from dethpc.common.runner import CommandRunner
from dethpc.devcluster.releases import SlurmRelease

#: a directory holding the tarballs and their SHA256SUMS instead of the checkout's
SOURCE_DIR_ENV = ENV_SLURM_SOURCE_DIR
#: Debian packages the build needs (measured: the plugins a dev cluster uses are built
#: with these; PAM, NVML, PMIx, lz4 and lua are left out)
BUILD_DEPS: tuple[str, ...] = (
    "build-essential", "pkg-config", "libmunge-dev", "libmariadb-dev-compat",
    "libmariadb-dev", "libjson-c-dev", "libyaml-dev", "libhttp-parser-dev", "libjwt-dev",
    "libdbus-1-dev",
)
STAMP = ".dethpc-build.json"
BUILD_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class SlurmBuild:
    release: SlurmRelease
    prefix: Path
    sha256: str
    #: what the installed ``sbatch --version`` printed, e.g. ``slurm 25.11.7``
    version: str
    build_seconds: float
    #: True when this call built it (False: the machine's cached build)
    built_now: bool = False

    @property
    def lib_dir(self) -> Path:
        return self.prefix / "lib"

    @property
    def include_dir(self) -> Path:
        return self.prefix / "include"


def source_dir() -> Path:
    """Where the tarballs are: ``$DETHPC_SLURM_SOURCE_DIR``, else the checkout's
    ``third_party/slurm``."""
    env = os.environ.get(SOURCE_DIR_ENV, "").strip()
    if env:
        return Path(env)
    return Path(dethpc.__file__).resolve().parents[1] / "third_party" / "slurm"


def expected_sha256(sums: str, name: str) -> str | None:
    """``name``'s hash in a ``sha256sum`` listing (None when it is not listed)."""
    for line in sums.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == name:
            return parts[0].lower()
    return None


def file_sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def checked_tarball(release: SlurmRelease, directory: Path | None = None) -> tuple[Path, str]:
    """The release's tarball and its sha256, checked against ``SHA256SUMS``."""
    name = release.traits.tarball
    if name is None:
        raise DethpcError(f"Slurm {release.value} is Debian's package; nothing to build")
    directory = directory or source_dir()
    tarball, sums = directory / name, directory / "SHA256SUMS"
    if not tarball.is_file() or not sums.is_file():
        raise DethpcError(
            f"Slurm {release.value}'s source was not found: {tarball} (and SHA256SUMS beside "
            f"it). It is vendored under third_party/slurm of a dethpc checkout; elsewhere "
            f"point ${SOURCE_DIR_ENV} at a directory holding both.")
    want = expected_sha256(sums.read_text(), name)
    got = file_sha256(tarball)
    if want != got:
        raise DethpcError(f"{tarball}: sha256 {got} does not match SHA256SUMS ({want}); "
                          "refusing to build it")
    return tarball, got


def build_prefix(shared: Path, release: SlurmRelease, sha256: str) -> Path:
    """Where the build of ``release`` from the tarball with ``sha256`` is installed."""
    return shared / "slurm" / f"{release.value}-{sha256[:12]}"


def current_link(shared: Path, release: SlurmRelease) -> Path:
    """The release's stable prefix (``layout.slurm_prefix``): a symlink to the build of
    the checkout's tarball, switched (atomically) when a new tarball was built."""
    return shared / "slurm" / release.value


def _point(link: Path, prefix: Path) -> None:
    if link.is_symlink() and os.readlink(link) == prefix.name:
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(prefix.name)
    tmp.replace(link)


def configure_argv(prefix: Path) -> list[str]:
    """``configure`` for a dev cluster's Slurm: everything under ``prefix`` (its plugins
    and its default config directory), found through ``SLURM_CONF`` at run time."""
    # --enable-multiple-slurmd: the dev cluster's 4 slurmd share one host (Debian's
    # package is built so; without it slurmctld finds no address for all but one node)
    return ["./configure", f"--prefix={prefix}", f"--sysconfdir={prefix}/etc",
            "--enable-multiple-slurmd", "--disable-debug", "--without-pmix",
            "--disable-dependency-tracking"]


def read_stamp(prefix: Path, sha256: str) -> dict[str, object] | None:
    """The build's stamp when the build under ``prefix`` is complete, from ``sha256``
    and configured as ``configure_argv`` says today (else it is built again)."""
    try:
        stamp = json.loads((prefix / STAMP).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("sha256") != sha256:
        return None
    return stamp if stamp.get("configure") == configure_argv(prefix)[1:] else None


def ensure_slurm_build(release: SlurmRelease, shared: Path, *,
                       say: Callable[[str], None] = lambda _m: None,
                       install_deps: Callable[[tuple[str, ...]], None] | None = None,
                       runner: CommandRunner | None = None) -> SlurmBuild:
    """The machine's build of ``release`` (built now when missing or interrupted)."""
    tarball, sha = checked_tarball(release)
    prefix = build_prefix(shared, release, sha)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    prefix.parent.chmod(0o755)
    with flocked(prefix.parent / f".{prefix.name}.lock"):  # one builder; others wait, reuse
        stamp = read_stamp(prefix, sha)
        if stamp is not None:
            _point(current_link(shared, release), prefix)
            return _build_of(release, prefix, sha, stamp)
        if install_deps is not None:
            install_deps(BUILD_DEPS)
        t0 = time.monotonic()
        say(f"building Slurm {release.value} from {tarball.name} into {prefix} "
            "(once per machine; about 4 minutes on 2 cores) ...")
        runner = runner or CommandRunner(timeout=BUILD_TIMEOUT_S, retries=0)
        version = _build(runner, tarball, prefix)
        stamp = {"sha256": sha, "release": release.value, "version": version,
                 "configure": configure_argv(prefix)[1:],
                 "build_seconds": round(time.monotonic() - t0, 1),
                 "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        tmp = prefix / f"{STAMP}.tmp"
        tmp.write_text(json.dumps(stamp, indent=1) + "\n")
        tmp.replace(prefix / STAMP)
        _point(current_link(shared, release), prefix)
        say(f"built Slurm {version} in {stamp['build_seconds']} s")
        return _build_of(release, prefix, sha, stamp, built_now=True)


def _build_of(release: SlurmRelease, prefix: Path, sha: str, stamp: dict[str, object],
              built_now: bool = False) -> SlurmBuild:
    seconds = stamp.get("build_seconds", 0.0)
    return SlurmBuild(release=release, prefix=prefix, sha256=sha,
                      version=str(stamp.get("version", "")),
                      build_seconds=float(seconds) if isinstance(seconds, (int, float)) else 0.0,
                      built_now=built_now)


def _build(runner: CommandRunner, tarball: Path, prefix: Path) -> str:
    """Unpack, configure, make, install into ``prefix``; return ``sbatch --version``."""
    work = prefix.parent / f".{prefix.name}.src"
    for leftover in (work, prefix):  # an interrupted build: start again
        if leftover.exists():
            shutil.rmtree(leftover)
    work.mkdir()
    try:
        runner.run(["tar", "-xJf", str(tarball), "-C", str(work), "--strip-components=1"])
        jobs = str(os.cpu_count() or 1)
        in_src = CommandRunner(timeout=runner.timeout, retries=0, cwd=str(work),
                               env=runner.env)
        in_src.run(configure_argv(prefix))
        in_src.run(["make", f"-j{jobs}"])
        in_src.run(["make", "install"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for sub in ("bin", "sbin", "lib", "include"):
        if not (prefix / sub).is_dir():
            raise DethpcError(f"the Slurm build installed no {prefix / sub}")
    # every Slurm command reads a config first, even for --version (without one it asks
    # DNS for a configless controller): a two-line one is enough
    smoke = prefix / "etc" / "version-check.conf"
    smoke.parent.mkdir(parents=True, exist_ok=True)
    smoke.write_text("ClusterName=version-check\nSlurmctldHost=localhost\n")
    res = CommandRunner(timeout=60.0, retries=0, env={**(runner.env or os.environ),
                                                      "SLURM_CONF": str(smoke)}).run(
        [str(prefix / "bin" / "sbatch"), "--version"], check=False, retry=False)
    if res.returncode != 0 or not res.stdout.startswith("slurm "):
        raise DethpcError(f"the built sbatch does not run: {res.stdout or res.stderr}".strip())
    return res.stdout.strip()
