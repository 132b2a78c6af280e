"""The daemon's image pulls: each image becomes a SIF once, off the daemon's tick.

Owns: ``Puller`` — one background pull per image (``containers.ensure_sif``: lock,
partial file, atomic rename, the runtime's own message on failure) in a small thread
pool, and what the daemon asks before it submits an experiment's first batch:
``state(settings, image)`` -> READY / PULLING / FAILED (with the runtime's words). A
pull that fails is remembered (the experiment fails once, with that message) until the
daemon restarts. ``images_of`` says which images an experiment's jobs use.
Must not: submit, touch the store, or block the caller (the tick of every other
experiment goes on while an image is pulled).
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from dethpc.common.errors import DethpcError
from dethpc.common.runner import CommandRunner
from dethpc.config.model import ClusterConfig, ContainerSettings, ExperimentConfig

log = logging.getLogger(__name__)


class PullState(enum.Enum):
    READY = "ready"
    PULLING = "pulling"
    FAILED = "failed"


@dataclass(frozen=True)
class PullStatus:
    state: PullState
    message: str = ""


def images_of(cfg: ExperimentConfig, cluster: ClusterConfig) -> list[str]:
    """The images an experiment's trials run in that must be pulled first (none when
    the runtime does not pull: Charliecloud runs an image directory as it is)."""
    from dethpc.jobs.containers import traits_of

    settings = cluster.containers
    if not cfg.environment.image or settings.runtime == "none" \
            or not traits_of(settings).pulls:
        return []
    pools = {cfg.resources.resource_pool, *(c.resource_pool for c in cfg.slurm.components)}
    out: list[str] = []
    for pool in pools:
        gpu = bool(cluster.pool(pool or cfg.resources.resource_pool).gres)
        image = (cfg.environment.image_gpu or cfg.environment.image) if gpu \
            else cfg.environment.image
        if image not in out:
            out.append(image)
    return out


def pull_env(settings: ContainerSettings) -> dict[str, str]:
    """The environment of a pull: the runtime's cache and tmp dirs off /tmp and home
    quotas when the site names them (``containers.cache_dir``/``tmp_dir``)."""
    env = dict(os.environ)
    prefixes = ("APPTAINER", "SINGULARITY")
    for prefix in prefixes:
        if settings.cache_dir is not None:
            env[f"{prefix}_CACHEDIR"] = str(settings.cache_dir)
        if settings.tmp_dir is not None:
            env[f"{prefix}_TMPDIR"] = str(settings.tmp_dir)
    return env


class Puller:
    """Background pulls, one per image; ``state`` never blocks."""

    def __init__(self, settings: ContainerSettings, workers: int = 2,
                 runner: Callable[[], CommandRunner] | None = None) -> None:
        self.settings = settings
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dethpc-pull")
        self.runner = runner or (lambda: CommandRunner(env=pull_env(settings), retries=0))
        self.futures: dict[str, Future[Path]] = {}

    def state(self, image: str) -> PullStatus:
        from dethpc.jobs.containers import ensure_sif, image_path

        future = self.futures.get(image)
        if future is None:
            if image_path(self.settings, image).is_file():
                return PullStatus(PullState.READY)
            log.info("pulling %s into the SIF cache", image)
            self.futures[image] = self.pool.submit(ensure_sif, self.settings, image,
                                                   self.runner())
            return PullStatus(PullState.PULLING)
        if not future.done():
            return PullStatus(PullState.PULLING)
        exc = future.exception()
        if exc is None:
            return PullStatus(PullState.READY)
        message = str(exc) if isinstance(exc, DethpcError) else f"{type(exc).__name__}: {exc}"
        return PullStatus(PullState.FAILED, message)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for every pull started so far (tests and shutdown)."""
        for future in list(self.futures.values()):
            try:
                future.result(timeout=timeout)
            except Exception:  # noqa: BLE001,S110 - ``state`` reports it
                pass

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


# ------------------------------------------------------------------ pull jobs
#: the folder under runs_root with one record (and script, and output) per image pulled
#: by a job (``containers.pull: job``)
PULLS_FOLDER = ".dethpc-pulls"


def pull_job_script(settings: ContainerSettings, image: str, python: str) -> str:
    """The pre-pull job: ``ensure_sif`` on a compute node (lock, partial, rename)."""
    import shlex

    argv = [python, "-m", "dethpc.jobs.imagepull", settings.runtime,
            str(settings.sif_cache or "-"), str(settings.cache_dir or "-"),
            str(settings.tmp_dir or "-"), image]
    return ("#!/bin/bash\n# dethpc: pull one image into the SIF cache before the trials "
            "that depend on this job\n" + " ".join(shlex.quote(a) for a in argv) + "\n")


@dataclass(frozen=True)
class PullJob:
    """A pre-pull job's files, keyed by the image's SIF name."""

    root: Path
    key: str

    @property
    def record(self) -> Path:
        return self.root / f"{self.key}.job"

    @property
    def submitting(self) -> Path:
        """The job name a pre-pull job goes out under, written before its sbatch (the
        record that a daemon killed around the sbatch is adopted by)."""
        return self.root / f"{self.key}.submitting"

    @property
    def script(self) -> Path:
        return self.root / f"{self.key}.sbatch"

    @property
    def output(self) -> Path:
        return self.root / f"{self.key}.out"

    def job_id(self) -> str | None:
        try:
            return self.record.read_text().strip() or None
        except FileNotFoundError:
            return None

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.output.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no output)"
        return " | ".join(text[-lines:]) or "(no output)"


def pull_job(runs_root: Path, settings: ContainerSettings, image: str) -> PullJob:
    from dethpc.jobs.containers import image_path

    return PullJob(Path(runs_root).expanduser() / PULLS_FOLDER,
                   image_path(settings, image).name.removesuffix(".sif"))


def main(argv: list[str]) -> int:
    """``python -m dethpc.jobs.imagepull RUNTIME SIF_CACHE CACHE_DIR TMP_DIR IMAGE`` (``-``:
    unset): the body of a pre-pull job."""
    import sys

    from dethpc.jobs.containers import ensure_sif

    if len(argv) != 5:
        print("usage: python -m dethpc.jobs.imagepull RUNTIME SIF_CACHE CACHE_DIR TMP_DIR IMAGE",
              file=sys.stderr)
        return 2
    runtime, cache, cache_dir, tmp_dir, image = argv

    def path(value: str) -> Path | None:
        return None if value == "-" else Path(value)

    settings = ContainerSettings(runtime=runtime, sif_cache=path(cache),  # type: ignore[arg-type]
                                 cache_dir=path(cache_dir), tmp_dir=path(tmp_dir))
    try:
        print(ensure_sif(settings, image, CommandRunner(env=pull_env(settings), retries=0)))
    except DethpcError as exc:
        print(f"dethpc: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
