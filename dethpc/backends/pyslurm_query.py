"""Optional pyslurm fast path for the live-job query of ``SlurmBackend.poll``.

Owns: the rule for using pyslurm (``import pyslurm`` works AND its major.minor
equals the running Slurm's, since pyslurm is built against one libslurm ABI)
and the translation of pyslurm job records to ``JobInfo`` (``job_infos``, pure:
the same ``JobInfo`` that ``parse_squeue`` makes of the same job's
``squeue -r`` line). Only the squeue half of a poll goes through pyslurm;
sacct stays on the CLI.
Must not: be imported at module level by anything (pyslurm is optional), or
do more than read: submits and cancels always use the CLI.

pyslurm's record (``pyslurm.Job``, 22.05 and later) differs from squeue in ways
``job_infos`` undoes: ``array_task_id`` of task 0 reads ``None`` (pyslurm reads
a 0 as "no value"); the pending remainder of an array is one record whose
``array_tasks_waiting`` lists the tasks ("2-4,7", squeue ``-r`` prints one line
each); ``state_reason`` reads "None" when there is none; ``exit_code`` is
already decoded (and pyslurm subtracts 128 from codes >= 128); a het job's
offset 0 reads ``None`` (squeue prints "123+0").

PyPI only serves pyslurm for Slurm 25.11; on the 22.05 dev cluster this module
always answers "no" and the CLI is used.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import sys
from collections.abc import Iterable
from typing import Any

from dethpc.backends.base import JobInfo
from dethpc.backends.slurm_parse import map_state, parse_version
from dethpc.common.errors import DethpcError
from dethpc.common.jobref import JobRef, base_job_id, parse_array_spec, task_refs

log = logging.getLogger(__name__)

#: what Slurm and pyslurm print for "no value" in text fields
_EMPTY = ("", "(null)", "None", "N/A")


#: how the RPC pacer names one ``Jobs.load()`` (one REQUEST_JOB_INFO, measured on 25.11)
PYSLURM_LOAD: tuple[str, ...] = ("pyslurm.Jobs.load",)

#: the child that imports pyslurm before this process does: an import that cannot find
#: a slurm.conf makes libslurm print "fatal: Could not establish a configuration source"
#: and exit the whole process (measured with pyslurm 25.11.2), which a daemon must survive
PROBE = "import sys, pyslurm; sys.stdout.write(str(pyslurm.__version__))"


def installed_version() -> str | None:
    """pyslurm's version from its package metadata (nothing imported); None when it is
    not installed."""
    try:
        return importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        return None


def probe_argv() -> list[str]:
    """This interpreter importing pyslurm in a child and printing its version."""
    return [sys.executable, "-c", PROBE]


def probed_version(returncode: int, stdout: str, stderr: str) -> str | None:
    """pyslurm's version from the probe child's result; None (logged) when the import
    failed or exited the child."""
    if returncode == 0 and stdout.strip():
        return stdout.strip()
    tail = (stderr.strip().splitlines() or [f"exit status {returncode}"])[-1]
    log.info("pyslurm is installed but cannot be imported here (%s): using the Slurm CLI",
             tail[:300])
    return None


def pyslurm_importable() -> bool:
    """True when ``import pyslurm`` works in this process; a broken build (libslurm
    missing or of another version: an ``OSError``/``ImportError`` at import) is logged
    and is a no. Call only after the probe child survived the same import."""
    try:
        importlib.import_module("pyslurm")
    except ModuleNotFoundError:
        return False
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken build's OSError
        log.info("pyslurm is installed but cannot be imported (%s: %s): using the Slurm CLI",
                 type(exc).__name__, exc)
        return False
    return True


def versions_match(pyslurm_version: str, slurm_version: tuple[int, int] | None) -> bool:
    """pyslurm is built against one libslurm ABI: its major.minor must be Slurm's."""
    if slurm_version is None:
        return False
    if parse_version(pyslurm_version) == slurm_version:
        return True
    log.info("pyslurm %s does not match Slurm %s.%02d: using the Slurm CLI",
             pyslurm_version, *slurm_version)
    return False


def load_query(slurm_version: tuple[int, int] | None) -> PyslurmQuery | None:
    """A query object when pyslurm matches ``slurm_version`` (major, minor), else None."""
    if slurm_version is None or not pyslurm_importable():
        return None
    mod = importlib.import_module("pyslurm")
    if not versions_match(str(getattr(mod, "__version__", "?")), slurm_version):
        return None
    return PyslurmQuery(mod)


class PyslurmQuery:
    """Live jobs through pyslurm's ``Jobs.load()`` (one RPC, like one squeue)."""

    def __init__(self, module: Any) -> None:
        self.mod = module

    def live_jobs(self, bases: Iterable[str], user: str | None = None) -> list[JobInfo]:
        """Every task of the jobs ``bases`` that slurmctld still holds (pending,
        running and recently ended ones, as ``squeue --states=all``); with ``user``,
        also every other job of that user (as ``squeue --user``)."""
        wanted = set(bases)
        try:
            records = list(self.mod.Jobs.load().values())
        except Exception as exc:  # noqa: BLE001 - pyslurm.RPCError and whatever a build raises
            raise DethpcError(f"pyslurm Jobs.load() failed ({type(exc).__name__}: {exc}); "
                              "the next poll tries again") from exc
        return [info for job in records for info in job_infos(job)
                if base_job_id(info.ref) in wanted
                or (user is not None and _text(getattr(job, "user_name", None)) == user)]


def _text(value: Any) -> str:
    text = "" if value is None else str(value).strip()
    return "" if text in _EMPTY else text


def _refs(job: Any) -> list[JobRef]:
    """The dethpc refs one pyslurm record stands for (squeue ``-r`` forms)."""
    job_id = getattr(job, "id", None)
    het_id = getattr(job, "heterogeneous_id", None)  # pyslurm >= 23.02 only
    if het_id:
        return [JobRef(str(het_id)).component(
            int(getattr(job, "heterogeneous_offset", None) or 0))]
    array_id = getattr(job, "array_id", None)
    if not array_id:
        return [JobRef(str(job_id))]
    task = getattr(job, "array_task_id", None)
    if task is not None:
        return [JobRef(str(array_id), task=int(task))]
    waiting = _text(getattr(job, "array_tasks_waiting", None))
    if waiting:  # the array's pending remainder, one record for many tasks
        try:
            tasks, _ = parse_array_spec(waiting.partition("%")[0])
        except ValueError:
            # an unparsable list: the array's own id, which the backend's poll
            # hands to every task without a record of its own
            return [JobRef(str(array_id))]
        return task_refs(str(array_id), tasks)
    return [JobRef(str(array_id), task=0)]  # a task whose index reads "no value": 0


def job_infos(job: Any) -> list[JobInfo]:
    """``JobInfo`` of every task one pyslurm job record stands for (pure; ``job`` is a
    ``pyslurm.Job`` or anything with its attribute names). A record without an id
    stands for nothing."""
    if getattr(job, "id", None) is None:
        return []
    raw = _text(getattr(job, "state", None))
    state = map_state(raw)
    code = signal = None
    if state.is_terminal:
        code = getattr(job, "exit_code", None)
        signal = getattr(job, "exit_code_signal", None) or None
    return [JobInfo(
        ref=ref, state=state, raw_state=raw, exit_code=code, signal=signal,
        reason=_text(getattr(job, "state_reason", None)),
        restart_count=int(getattr(job, "requeue_count", 0) or 0),
        nodes=_text(getattr(job, "allocated_nodes", None)),
        name=_text(getattr(job, "name", None)),
        comment=_text(getattr(job, "comment", None)),
        qos=_text(getattr(job, "qos", None)),
        account=_text(getattr(job, "account", None)),
    ) for ref in _refs(job)]
