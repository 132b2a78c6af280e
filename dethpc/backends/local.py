"""The local backend: the same rendered sbatch scripts, run as plain processes.

Owns: ``LocalBackend`` — job-id allocation, one task directory per array
index, one detached supervisor process per task (``local_supervisor``), and
the daemon-side operations on the spool (poll, cancel, requeue, throttle,
find). Every bit of state lives in files under the spool (layout in
``local_spool``), so a ``LocalBackend`` created after the daemon was
SIGKILLed sees and keeps managing the same jobs; no job is lost or run twice.

Slurm semantics emulated: array tasks with their own ``SLURM_JOB_ID``, the
``%K`` throttle (changeable live), a global concurrency limit counted in tasks (a
job's ``--ntasks``, or ``--nodes`` x ``--ntasks-per-node``, from its ``#SBATCH`` lines
and extra arguments, as sbatch reads them), the time-limit
signal to the batch shell ``signal_lead_s`` before the limit then
TERM/KILL (TIMEOUT), the job's output to ``JobRequest.output`` when given (sbatch's
``--output``; else the spool's ``output.log``), requeue by exit code ``LOCAL_REQUEUE_EXIT`` or by
``requeue()``, and a dead supervisor reported as NODE_FAIL.
Must not: run Slurm commands, or block on a task (every call returns at once;
``poll`` starts no subprocess).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal as signal_mod
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dethpc.backends.base import (
    UNLIMITED,
    JobAction,
    JobInfo,
    JobRequest,
    JobState,
    PoolLimits,
)
from dethpc.backends.local_spool import (
    TERMINAL,
    Spool,
    TaskPaths,
    locked,
    read_json,
    try_lock,
    unlock,
    write_json_atomic,
    write_text_atomic,
)
from dethpc.backends.local_supervisor import kill_group, signal_number
from dethpc.common.errors import NotFoundError, SubmitError
from dethpc.common.jobref import JobRef, sort_key
from dethpc.common.sbatch_options import script_header, task_count
from dethpc.common.traits import LOCAL, BackendTraits

log = logging.getLogger(__name__)

#: what ``max_array_size`` reports (Slurm's usual MaxArraySize on the dev cluster)
LOCAL_MAX_ARRAY_SIZE = 10001
#: how long ``requeue`` waits for a just-finished supervisor to exit
_LOCK_WAIT_S = 5.0
#: how long a signal waits for a starting task to be recorded running (``_signal``)
SIGNAL_WAIT_S = 5.0

_RAW = {
    "pending": "PENDING", "running": "RUNNING", "completed": "COMPLETED",
    "failed": "FAILED", "cancelled": "CANCELLED", "timeout": "TIMEOUT",
    "node_fail": "NODE_FAIL",
}


class LocalBackend:
    """Runs job scripts on this machine with Slurm semantics; see the module docstring."""

    name = "local"
    traits: BackendTraits = LOCAL

    def __init__(self, spool_dir: Path, max_concurrent: int = 0) -> None:
        self.spool = Spool(Path(spool_dir).expanduser()).ensure()
        self.max_concurrent = max_concurrent if max_concurrent > 0 else (os.cpu_count() or 1)
        write_json_atomic(self.spool.config, {"max_concurrent": self.max_concurrent})

    # ------------------------------------------------------------- protocol
    def available(self) -> bool:
        return True

    def max_array_size(self) -> int:
        return LOCAL_MAX_ARRAY_SIZE

    def judge(self, request: JobRequest) -> str | None:
        """The local backend runs whatever ``check_pool`` let through: no verdict."""
        return None

    def check_pool(self, partition: str | None, qos: str | None, nodes: int,
                   tasks_per_node: int, gpus_per_node: int) -> None:
        """No partitions here: a no-op (the job runs on this machine as asked)."""

    def job_limits(self, partition: str | None, qos: str | None, account: str | None,
                   extra_args: Sequence[str] = ()) -> PoolLimits:
        """No per-user limits: ``max_concurrent`` only throttles what runs at once."""
        return UNLIMITED

    def user_jobs(self) -> list[JobInfo] | None:
        return None

    def submit(self, request: JobRequest) -> list[JobRef]:
        indices: list[int | None] = list(sorted(set(request.array_indices))) or [None]
        if any(i is not None and (i < 0 or i >= LOCAL_MAX_ARRAY_SIZE) for i in indices):
            raise SubmitError(f"array index out of range 0..{LOCAL_MAX_ARRAY_SIZE - 1}")
        if not Path(request.script).is_file():
            raise SubmitError(f"job script {request.script} does not exist; render it first")
        try:
            header = script_header(Path(request.script).read_text(errors="replace"))
        except ValueError as exc:  # shlex: an unbalanced quote in an #SBATCH line
            raise SubmitError(f"job script {request.script}: its #SBATCH lines cannot be "
                              f"read: {exc}") from exc
        tasks = task_count([*(option for option, _ in header), *request.extra_args])
        first = self.spool.allocate_ids(len(indices))
        job = str(first)
        if request.array_indices:
            self.spool.array_dir(job).mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.spool.throttle(job), f"{request.throttle or 0}\n")
        refs: list[JobRef] = []
        for pos, index in enumerate(indices):
            ref = request.task_ref(job, index) if index is not None else JobRef(job)
            self._create_task(ref, request, first + pos, job, index,
                              refs[-1] if refs else None, tasks)
            refs.append(ref)
        return refs

    def poll(self, refs: Sequence[str]) -> dict[str, JobInfo]:
        return {ref: self._info(ref) for ref in refs}

    def find(self, names: Sequence[str]) -> list[JobInfo]:
        wanted = set(names)
        out = []
        for task_dir in sorted(self.spool.tasks.iterdir(), key=_ref_key):
            req = read_json(TaskPaths(task_dir).request)
            if req is not None and req.get("name") in wanted:
                out.append(self._info(task_dir.name))
        return out

    def cancel(self, refs: Sequence[str], signal: str | None = None) -> None:
        for ref in refs:
            if signal is not None:
                self._signal(ref, signal_number(signal))
            else:
                self._cancel(ref)

    def signal_steps(self, refs: Sequence[str], signal: str) -> None:
        """A local task is one process group (its shell and its step): all of it gets
        ``signal`` (the hang watchdog's stack-dump signal is ignored by a shell)."""
        for ref in refs:
            self._signal(ref, signal_number(signal))

    def act(self, refs: Sequence[str], action: JobAction) -> None:
        """Local tasks are never held: a release does nothing."""
        if action is JobAction.REQUEUE:
            for ref in refs:
                self._requeue(ref)

    def set_throttle(self, array_job_id: str, limit: int) -> None:
        if not self.spool.array_dir(array_job_id).is_dir():
            raise NotFoundError(f"no local array job {array_job_id} in {self.spool.root}")
        write_text_atomic(self.spool.throttle(array_job_id), f"{max(0, limit)}\n")

    # ---------------------------------------------------------------- tasks
    def _create_task(self, ref: str, request: JobRequest, job_id: int, array_job: str,
                     index: int | None, prev_ref: str | None, tasks: int) -> None:
        paths = self.spool.task(ref)
        paths.root.mkdir(parents=True)
        lock_fd = try_lock(paths.supervisor_lock)
        if lock_fd is None:  # impossible for a fresh directory
            raise SubmitError(f"local task {ref} is locked by another process")
        try:
            idx = list(request.array_indices)
            write_json_atomic(paths.request, {
                "ref": ref, "job_id": job_id, "array_job_id": array_job,
                "task_id": index, "is_array": bool(idx), "prev_ref": prev_ref,
                "name": request.name,
                "comment": request.comment, "script": str(Path(request.script).resolve()),
                "workdir": str(Path(request.workdir).resolve()), "env": dict(request.env),
                "time_limit_s": request.time_limit_s, "signal": request.signal,
                "signal_lead_s": request.signal_lead_s,
                "output": str(Path(request.output).resolve()) if request.output else None,
                "array_count": len(idx), "array_min": min(idx, default=0),
                "array_max": max(idx, default=0), "tasks": tasks,
            })
            write_json_atomic(paths.state, {"state": "pending", "restart_count": 0,
                                            "submit_time": time.time(), "reason": ""})
            _launch_supervisor(paths, lock_fd)
        finally:
            unlock(lock_fd)

    def _info(self, ref: str) -> JobInfo:
        try:
            paths = self.spool.task(ref)
        except ValueError:
            return JobInfo(ref=ref, state=JobState.UNKNOWN)
        state = read_json(paths.state)
        req = read_json(paths.request) or {}
        if state is None:
            return JobInfo(ref=ref, state=JobState.UNKNOWN)
        if state.get("state") not in TERMINAL:
            state = self._check_alive(paths, state)
        return _to_info(ref, state, req)

    def _check_alive(self, paths: TaskPaths, state: dict[str, Any],
                     lost_as: str = "node_fail") -> dict[str, Any]:
        """A live task whose supervisor lock is free lost its supervisor: NODE_FAIL
        (or ``lost_as``, e.g. "cancelled" when that was asked anyway)."""
        fd = try_lock(paths.supervisor_lock)
        if fd is None:
            return state
        try:
            with locked(paths.control_lock):
                current = read_json(paths.state) or state
                if current.get("state") in TERMINAL:
                    return current
                kill_group(current.get("pgid"), signal_mod.SIGKILL)
                reason = "supervisor lost" if lost_as == "node_fail" else "cancelled"
                current.update(state=lost_as, reason=reason,
                               end_time=time.time(), pid=None, pgid=None)
                write_json_atomic(paths.state, current)
                log.warning("local task %s lost its supervisor: marked %s",
                            paths.root.name, lost_as)
                return current
        finally:
            unlock(fd)

    def _signal(self, ref: str, signum: int) -> None:
        """Signal a running task's process group. The supervisor records "running"
        just after it started the script, which may already be running (and visible)
        by then: a task not yet recorded running gets ``SIGNAL_WAIT_S`` to be (f31 on
        a loaded machine: the signal was dropped and the job ran on)."""
        deadline = time.monotonic() + SIGNAL_WAIT_S
        while True:
            state = read_json(self.spool.task(ref).state) or {}
            if state.get("state") == "running":
                kill_group(state.get("pgid"), signum)
                return
            if state.get("state") != "pending" or time.monotonic() > deadline:
                return
            time.sleep(0.05)

    def _cancel(self, ref: str) -> None:
        paths = self.spool.task(ref)
        if not paths.root.is_dir():
            return
        with locked(paths.control_lock):
            state = read_json(paths.state)
            if state is None or state.get("state") in TERMINAL:
                return
            write_text_atomic(paths.cancel, "cancel\n")
        self._check_alive(paths, state, lost_as="cancelled")  # no supervisor to see the marker

    def _requeue(self, ref: str) -> None:
        paths = self.spool.task(ref)
        with locked(paths.control_lock):
            state = read_json(paths.state)
            if state is None:
                raise NotFoundError(f"no local job {ref} in {self.spool.root}")
            if state.get("state") not in TERMINAL:
                write_text_atomic(paths.requeue, "requeue\n")
                return
        lock_fd = _wait_lock(paths.supervisor_lock, _LOCK_WAIT_S)
        if lock_fd is None:  # a new supervisor owns it already: ask it
            write_text_atomic(paths.requeue, "requeue\n")
            return
        try:
            with locked(paths.control_lock):
                state = read_json(paths.state) or {}
                for marker in (paths.cancel, paths.requeue):
                    with contextlib.suppress(FileNotFoundError):
                        marker.unlink()
                state.update(state="pending", reason="Requeued", pid=None, pgid=None,
                             exit_code=None, signal=None, end_time=None,
                             restart_count=int(state.get("restart_count", 0)) + 1)
                write_json_atomic(paths.state, state)
            _launch_supervisor(paths, lock_fd)
        finally:
            unlock(lock_fd)


# ------------------------------------------------------------------ helpers
def _launch_supervisor(paths: TaskPaths, lock_fd: int) -> None:
    """Start the detached supervisor; it inherits ``lock_fd`` (the held supervisor.lock)."""
    package_parent = Path(__file__).resolve().parents[2]  # so `-m dethpc...` imports
    with open(paths.supervisor_log, "ab") as errlog:
        subprocess.Popen(  # noqa: S603 - argv list
            [sys.executable, "-m", "dethpc.backends.local_supervisor",
             str(paths.root), str(lock_fd)],
            cwd=package_parent, stdin=subprocess.DEVNULL, stdout=errlog, stderr=errlog,
            start_new_session=True, pass_fds=(lock_fd,),
        )


def _wait_lock(path: Path, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while True:
        fd = try_lock(path)
        if fd is not None or time.monotonic() >= deadline:
            return fd
        time.sleep(0.02)


def _to_info(ref: str, state: dict[str, Any], req: dict[str, Any]) -> JobInfo:
    word = str(state.get("state", ""))
    try:
        js = JobState(word)
    except ValueError:
        js = JobState.UNKNOWN
    return JobInfo(
        ref=ref, state=js, raw_state=_RAW.get(word, word.upper()),
        exit_code=state.get("exit_code"), signal=state.get("signal"),
        reason=str(state.get("reason") or ""),
        restart_count=int(state.get("restart_count", 0)),
        nodes="localhost" if js is JobState.RUNNING else "",
        name=str(req.get("name", "")), comment=str(req.get("comment", "")),
    )


def _ref_key(path: Path) -> tuple[int, int, str]:
    """A spooled task's directory is named by its ref: in job, then task order."""
    return (*sort_key(path.name), path.name)
