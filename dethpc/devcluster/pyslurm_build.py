"""Build pyslurm against a dev cluster's Slurm build, once per machine (a test-only step).

Owns: where the wheel lives (``<build prefix>/pyslurm/``, so a new Slurm build gets its
own wheel and the wheel's run-time path to ``libslurm`` stays valid), fetching
pyslurm's source from PyPI (``pip download --no-binary``: PyPI's pyslurm is source only)
and ``pip wheel`` with ``SLURM_INCLUDE_DIR``/``SLURM_LIB_DIR`` pointing at the build.
Measured: 3 min 27 s on 2 cores (Cython and the C compiler, nothing else running).
Must not: install the wheel (scripts/test.sh does, into the test venv) or build Slurm
(``slurm_build``). Every external command goes through ``CommandRunner``.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dethpc.common.errors import DethpcError
from dethpc.common.flock import flocked
from dethpc.common.runner import CommandRunner
from dethpc.devcluster.slurm_build import SlurmBuild

BUILD_TIMEOUT_S = 1800.0


def wheel_dir(build: SlurmBuild) -> Path:
    return build.prefix / "pyslurm"


def cached_wheel(build: SlurmBuild, version: str) -> Path | None:
    """The machine's wheel of pyslurm ``version`` for ``build``, when built already."""
    found = sorted(wheel_dir(build).glob(f"pyslurm-{version}-*.whl"))
    return found[-1] if found else None


def build_env(build: SlurmBuild, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment pyslurm's setup.py reads to find this Slurm's headers and library."""
    env = dict(os.environ if base is None else base)
    env.update(SLURM_INCLUDE_DIR=str(build.include_dir), SLURM_LIB_DIR=str(build.lib_dir),
               PYSLURM_BUILD_JOBS=str(os.cpu_count() or 1))
    return env


def ensure_pyslurm_wheel(build: SlurmBuild, *, say: Callable[[str], None] = lambda _m: None,
                         runner: CommandRunner | None = None) -> Path:
    """The wheel of the pyslurm that matches ``build``'s release (built now when missing)."""
    version = build.release.traits.pyslurm
    if version is None:
        raise DethpcError(f"PyPI has no pyslurm for Slurm {build.release.value}")
    out = wheel_dir(build)
    out.mkdir(parents=True, exist_ok=True)
    with flocked(out / ".lock"):
        have = cached_wheel(build, version)
        if have is not None:
            return have
        t0 = time.monotonic()
        say(f"building pyslurm {version} against {build.prefix} (once per machine; about "
            "3.5 minutes on 2 cores) ...")
        work = out / ".work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        runner = runner or CommandRunner(timeout=BUILD_TIMEOUT_S, retries=0,
                                         env=build_env(build))
        try:
            pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
            runner.run([*pip, "download", "--no-deps", "--no-binary", ":all:",
                        f"pyslurm=={version}", "-d", str(work)])
            sdists = sorted(work.glob(f"pyslurm-{version}.tar.gz"))
            if not sdists:
                raise DethpcError(f"pip download left no pyslurm-{version}.tar.gz in {work}")
            runner.run([*pip, "wheel", "--no-deps", str(sdists[0]), "-w", str(work)])
            wheels = sorted(work.glob(f"pyslurm-{version}-*.whl"))
            if not wheels:
                raise DethpcError(f"pip wheel left no pyslurm wheel in {work}")
            target = out / wheels[0].name
            wheels[0].replace(target)  # last: a wheel in place is a whole one
        finally:
            shutil.rmtree(work, ignore_errors=True)
        say(f"built {target.name} in {time.monotonic() - t0:.0f} s")
        return target
