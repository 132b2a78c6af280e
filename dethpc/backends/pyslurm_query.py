"""Optional pyslurm fast path for the live-job query of ``SlurmBackend.poll``.

Owns: the rule for using pyslurm (``import pyslurm`` works AND its major.minor
equals the running Slurm's, since pyslurm is built against one libslurm ABI)
and the translation of pyslurm job records to ``JobInfo``. Only the squeue
half of a poll goes through pyslurm; sacct stays on the CLI.
Must not: be imported at module level by anything (pyslurm is optional), or
do more than read: submits and cancels always use the CLI.

PyPI only serves pyslurm for Slurm 25.11; on the 22.05 dev cluster this module
always answers "no" and the CLI is used.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from typing import Any

from dethpc.backends.base import JobInfo
from dethpc.backends.slurm_parse import map_state, parse_version

log = logging.getLogger(__name__)


def pyslurm_importable() -> bool:
    try:
        importlib.import_module("pyslurm")
    except Exception:  # noqa: BLE001 - ImportError, or a broken build's OSError
        return False
    return True


def load_query(slurm_version: tuple[int, int] | None) -> PyslurmQuery | None:
    """A query object when pyslurm matches ``slurm_version`` (major, minor), else None."""
    if slurm_version is None or not pyslurm_importable():
        return None
    mod = importlib.import_module("pyslurm")
    have = parse_version(str(getattr(mod, "__version__", "")))
    if have != slurm_version:
        log.info("pyslurm %s does not match Slurm %s.%02d: using the CLI",
                 getattr(mod, "__version__", "?"), *slurm_version)
        return None
    return PyslurmQuery(mod)


class PyslurmQuery:
    """Live jobs through pyslurm's ``Jobs.load()`` (one RPC, like one squeue)."""

    def __init__(self, module: Any) -> None:
        self.mod = module

    def live_jobs(self, bases: Iterable[str]) -> list[JobInfo]:
        wanted = set(bases)
        out = []
        for job in self.mod.Jobs.load().values():
            info = _to_info(job)
            if info is not None and info.ref.split("_")[0] in wanted:
                out.append(info)
        return out


def _to_info(job: Any) -> JobInfo | None:
    array_id = getattr(job, "array_id", None)
    task = getattr(job, "array_task_id", None)
    job_id = getattr(job, "id", None)
    if job_id is None:
        return None
    ref = f"{array_id}_{task}" if array_id and task is not None else str(job_id)
    raw = str(getattr(job, "state", "") or "")
    return JobInfo(
        ref=ref, state=map_state(raw), raw_state=raw,
        reason=str(getattr(job, "state_reason", "") or ""),
        nodes=str(getattr(job, "allocated_nodes", "") or ""),
        name=str(getattr(job, "name", "") or ""),
        comment=str(getattr(job, "comment", "") or ""),
        restart_count=int(getattr(job, "requeue_count", 0) or 0),
    )
