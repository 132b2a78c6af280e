"""The per-task supervisor of the local backend (``python -m dethpc.backends.local_supervisor``).

Owns: the life of one task, with Slurm semantics: wait for a global slot and
an array-throttle slot, run ``bash <script>`` in its own process group with a
Slurm-like environment, deliver the time-limit signal to the batch shell
``signal_lead_s`` before the limit, SIGTERM the group at the limit and SIGKILL
it ``KILL_WAIT_S`` later (TIMEOUT), honour the ``cancel`` and ``requeue``
markers, rerun on exit code ``LOCAL_REQUEUE_EXIT`` with
``SLURM_RESTART_COUNT`` + 1, write the script's output where the request asks
(``output``, else the spool's ``output.log``), and write ``state.json`` at every transition.
The supervisor runs detached (own session) so that it outlives the daemon; it
holds ``supervisor.lock`` (inherited from the backend as an open fd) for its
whole life, which is how anyone can tell it is alive.
Must not: import anything heavier than the standard library and the spool
module (hundreds of these may wait at once), or touch other tasks' files.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dethpc.backends.local_spool import (
    Spool,
    TaskPaths,
    locked,
    read_json,
    try_lock,
    unlock,
    write_json_atomic,
)
from dethpc.common.exitcodes import LOCAL_REQUEUE_EXIT
from dethpc.common.jobenv import ENV_BACKEND
from dethpc.common.traits import BackendKind

#: seconds between SIGTERM and SIGKILL (Slurm's KillWait)
KILL_WAIT_S = 5.0
#: how often a waiting or running supervisor looks at its markers and the clock
TICK_S = 0.05
#: how often a pending task tries for a slot
SLOT_POLL_S = 0.1

NODENAME = "localhost"


def signal_number(name: str | int) -> int:
    """"USR2", "SIGUSR2", "12" or 12 -> the signal number."""
    if isinstance(name, int) or str(name).isdigit():
        return int(name)
    upper = str(name).upper()
    return int(signal.Signals[upper if upper.startswith("SIG") else f"SIG{upper}"])


def kill_group(pgid: int | None, sig: int) -> None:
    if pgid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


class Supervisor:
    """Runs one task to a terminal state; see the module docstring."""

    def __init__(self, task_dir: Path) -> None:
        self.paths = TaskPaths(task_dir)
        self.spool = Spool(task_dir.parent.parent)
        req = read_json(self.paths.request)
        state = read_json(self.paths.state)
        if req is None or state is None:
            raise SystemExit(f"supervisor: {task_dir} has no request.json/state.json")
        self.req: dict[str, Any] = req
        self.state: dict[str, Any] = state
        self.slot_fds: list[int] = []

    # ---------------------------------------------------------------- state
    def save(self, **changes: Any) -> None:
        self.state.update(changes)
        write_json_atomic(self.paths.state, self.state)

    def finish(self, **changes: Any) -> bool:
        """Write the terminal state unless a requeue was asked meanwhile (then False)."""
        with locked(self.paths.control_lock):
            if self.paths.requeue.exists() and changes.get("state") != "cancelled":
                self.paths.requeue.unlink()
                return False
            self.save(end_time=time.time(), pid=None, pgid=None, **changes)
            return True

    # ---------------------------------------------------------------- slots
    def acquire_slots(self) -> bool:
        """Wait for a throttle slot (arrays) and the task's global slots; False when
        cancelled. While it waits, ``state.json`` says why, in Slurm's words."""
        while True:
            if self.paths.cancel.exists():
                return False
            with contextlib.suppress(FileNotFoundError):
                self.paths.requeue.unlink()  # a pending task has nothing to requeue
            fds, why = self._try_slots()
            if fds is not None:
                self.slot_fds = fds
                return True
            if why and self.state.get("reason") != why:
                self.save(reason=why)
            time.sleep(SLOT_POLL_S * (0.5 + random.random()))  # noqa: S311 - jitter

    @property
    def tasks(self) -> int:
        """The job's task count (``request.json``; 1 for a spool written before it)."""
        return max(1, int(self.req.get("tasks") or 1))

    def _behind_predecessor(self) -> bool:
        """Array tasks start in index order: wait while an earlier task of the same
        array is still waiting for its first start and its supervisor is alive."""
        prev = self.req.get("prev_ref")
        while prev:
            paths = self.spool.task(str(prev))
            state = read_json(paths.state) or {}
            if state.get("state") != "pending" or int(state.get("restart_count", 0)) > 0:
                return False
            fd = try_lock(paths.supervisor_lock)
            if fd is None:
                return True  # alive and waiting: it goes first
            unlock(fd)  # its supervisor is gone: look further back
            prev = (read_json(paths.request) or {}).get("prev_ref")
        return False

    def _try_slots(self) -> tuple[list[int] | None, str]:
        """The slot locks this task runs under, or None and Slurm's pending reason: one
        throttle slot of its array, and one global slot per task (all of them for a job
        with more tasks than there are slots, which would otherwise never start)."""
        if self._behind_predecessor():
            return None, "Priority"
        held: list[int] = []
        array_id = self.req.get("array_job_id")
        if self.req.get("is_array") and array_id:
            limit = self.spool.array_throttle(str(array_id))
            if limit:
                fds = self._take([self.spool.array_slot(str(array_id), k)
                                  for k in range(limit)], 1)
                if fds is None:
                    return None, "JobArrayTaskLimit"
                held += fds
        n = self.spool.max_concurrent(os.cpu_count() or 1)
        fds = self._take([self.spool.slot(k) for k in range(n)], min(self.tasks, n))
        if fds is None:
            for h in held:
                unlock(h)
            return None, "Resources"
        return [*held, *fds], ""

    @staticmethod
    def _take(paths: list[Path], count: int) -> list[int] | None:
        """Locks on ``count`` of ``paths`` (the first free ones, one pass), or None and
        none held."""
        fds: list[int] = []
        for p in paths:
            if len(fds) == count:
                break
            fd = try_lock(p)
            if fd is not None:
                fds.append(fd)
        if len(fds) < count:
            for fd in fds:
                unlock(fd)
            return None
        return fds

    def release_slots(self) -> None:
        for fd in self.slot_fds:
            unlock(fd)
        self.slot_fds = []

    # ------------------------------------------------------------------ run
    def environment(self) -> dict[str, str]:
        req, restart = self.req, int(self.state.get("restart_count", 0))
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
        ncpu = str(os.cpu_count() or 1)
        env.update({
            "SLURM_JOB_ID": str(req["job_id"]), "SLURM_JOBID": str(req["job_id"]),
            "SLURM_JOB_NAME": str(req["name"]), "SLURM_PROCID": "0",
            "SLURM_NTASKS": str(self.tasks), "SLURM_NPROCS": str(self.tasks),
            "SLURM_NNODES": "1",
            "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0", "SLURM_LOCALID": "0",
            "SLURM_NODELIST": NODENAME, "SLURM_JOB_NODELIST": NODENAME,
            "SLURMD_NODENAME": NODENAME, "SLURM_TASKS_PER_NODE": str(self.tasks),
            "SLURM_RESTART_COUNT": str(restart), "SLURM_SUBMIT_DIR": str(req["workdir"]),
            "SLURM_SUBMIT_HOST": socket.gethostname(), "SLURM_CPUS_ON_NODE": ncpu,
            "SLURM_JOB_CPUS_PER_NODE": ncpu, ENV_BACKEND: BackendKind.LOCAL.value,
        })
        if req.get("is_array"):
            env["SLURM_ARRAY_JOB_ID"] = str(req["array_job_id"])
            env["SLURM_ARRAY_TASK_ID"] = str(req["task_id"])
            for key in ("count", "min", "max"):
                env[f"SLURM_ARRAY_TASK_{key.upper()}"] = str(req[f"array_{key}"])
        return env

    @property
    def output(self) -> Path:
        """Where the script's stdout and stderr go: the request's ``output`` (sbatch's
        ``--output``, appended across requeues), else the spool's ``output.log``."""
        asked = self.req.get("output")
        return Path(str(asked)) if asked else self.paths.output

    def run_once(self) -> dict[str, Any] | None:
        """Run the script once; return the terminal changes, or None to requeue."""
        try:
            with open(self.output, "ab") as out:
                proc = subprocess.Popen(  # noqa: S603 - argv list
                    ["bash", str(self.req["script"])], cwd=self.req["workdir"],
                    env=self.environment(), stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )
        except OSError as exc:  # e.g. a missing workdir: the job fails, as on Slurm
            return {"state": "failed", "exit_code": 1, "signal": None,
                    "reason": f"could not start the script: {exc}"}
        self.save(state="running", pid=proc.pid, pgid=proc.pid, start_time=time.time(),
                  reason="")
        outcome = self.watch(proc)
        kill_group(proc.pid, signal.SIGKILL)  # leftovers of the job, as slurmd does
        if outcome == "requeue":
            return None
        rc = proc.returncode
        code, sig = (0, -rc) if rc < 0 else (rc, None)
        if outcome == "cancelled":
            return {"state": "cancelled", "exit_code": code, "signal": sig}
        if outcome == "timeout":
            return {"state": "timeout", "exit_code": code, "signal": sig, "reason": "TimeLimit"}
        if rc == LOCAL_REQUEUE_EXIT:
            return None
        state = "completed" if rc == 0 else "failed"
        reason = "" if rc == 0 else ("NonZeroExitCode" if rc > 0 else "Signal")
        return {"state": state, "exit_code": code, "signal": sig, "reason": reason}

    def watch(self, proc: subprocess.Popen[bytes]) -> str:
        """Wait for the script; handle markers and the time limit. Returns
        "exited", "cancelled", "requeue" or "timeout"."""
        start = time.monotonic()
        limit = self.req.get("time_limit_s")
        sig_name: str | None = self.req.get("signal")
        signal_at = (start + max(0, limit - int(self.req.get("signal_lead_s") or 0))
                     if limit and sig_name else None)
        while proc.poll() is None:
            now = time.monotonic()
            if self.paths.cancel.exists():
                self.terminate(proc)
                return "cancelled"
            if self.paths.requeue.exists():
                with contextlib.suppress(FileNotFoundError):
                    self.paths.requeue.unlink()
                self.terminate(proc)
                return "requeue"
            if signal_at is not None and sig_name and now >= signal_at:
                signal_at = None
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal_number(sig_name))  # the batch shell only (B:)
            if limit and now >= start + limit:
                self.terminate(proc)
                return "timeout"
            time.sleep(TICK_S)
        return "exited"

    @staticmethod
    def terminate(proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM the job's process group, SIGKILL it after KILL_WAIT_S."""
        kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid, signal.SIGKILL)
            proc.wait()

    def main(self) -> None:
        self.save(supervisor_pid=os.getpid())
        while True:
            if not self.acquire_slots():
                if self.finish(state="cancelled", reason="cancelled while pending"):
                    return
                continue
            try:
                result = self.run_once()
            finally:
                self.release_slots()
            if result is not None and self.finish(**result):
                return
            self.save(state="pending", reason="Requeued", pid=None, pgid=None,
                      restart_count=int(self.state.get("restart_count", 0)) + 1)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m dethpc.backends.local_supervisor TASK_DIR LOCK_FD",
              file=sys.stderr)
        return 2
    lock_fd = int(argv[2])  # inherited flock on supervisor.lock: held until we exit
    try:
        Supervisor(Path(argv[1])).main()
    finally:
        os.close(lock_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
