"""The on-disk spool of the local backend: layout, atomic files and locks.

Owns: every path under the spool directory, atomic JSON writes, fcntl lock
helpers and job-id allocation. ``LocalBackend`` (the daemon's side) and
``local_supervisor`` (one detached process per task) share the spool only
through this module, so that a daemon killed at any instant and a new
``LocalBackend`` on the same directory see exactly the same state.
Must not: start processes, or decide job semantics (that is local.py and
local_supervisor.py).

Layout::

    <spool>/
      counter               next job id; read+written under counter.lock
      counter.lock
      config.json           {"max_concurrent": N}; re-read by waiting supervisors
      slots/<n>.lock        global concurrency: a running task holds one flock
      arrays/<job>/throttle the array's %K (0 = unlimited); honoured live
      arrays/<job>/slot-<k>.lock   per-array throttle slots
      tasks/<ref>/          one directory per task; <ref> is "<job>_<idx>" or "<job>"
        request.json        what to run (script, workdir, env, limits, ids); immutable
        state.json          the task's state; written atomically (tmp + rename)
        supervisor.lock     flock held by the task's supervisor for its whole life
        control.lock        serialises markers against the final state write
        cancel | requeue    markers written by the backend, consumed by the supervisor
        output.log          the script's stdout+stderr (appended across requeues), unless
                            request.json names its own "output" (sbatch's --output)
        supervisor.log      the supervisor's own stderr

Who writes ``state.json``: only a process holding ``supervisor.lock`` (the
supervisor, or the backend when the supervisor is gone). A non-terminal state
whose ``supervisor.lock`` can be taken means the supervisor died: the task is
lost (``node_fail``, the analogue of a Slurm node failure).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dethpc.common.flock import flocked

TERMINAL = frozenset({"completed", "failed", "cancelled", "timeout", "node_fail",
                      "preempted", "out_of_memory"})


@dataclass(frozen=True)
class TaskPaths:
    root: Path

    @property
    def request(self) -> Path:
        return self.root / "request.json"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def supervisor_lock(self) -> Path:
        return self.root / "supervisor.lock"

    @property
    def control_lock(self) -> Path:
        return self.root / "control.lock"

    @property
    def cancel(self) -> Path:
        return self.root / "cancel"

    @property
    def requeue(self) -> Path:
        return self.root / "requeue"

    @property
    def output(self) -> Path:
        return self.root / "output.log"

    @property
    def supervisor_log(self) -> Path:
        return self.root / "supervisor.log"


@dataclass(frozen=True)
class Spool:
    root: Path

    @property
    def tasks(self) -> Path:
        return self.root / "tasks"

    def task(self, ref: str) -> TaskPaths:
        if not ref or "/" in ref or ref.startswith("."):
            raise ValueError(f"not a local job ref: {ref!r}")
        return TaskPaths(self.tasks / ref)

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    def slot(self, n: int) -> Path:
        return self.root / "slots" / f"{n}.lock"

    def array_dir(self, job_id: str) -> Path:
        return self.root / "arrays" / job_id

    def throttle(self, job_id: str) -> Path:
        return self.array_dir(job_id) / "throttle"

    def array_slot(self, job_id: str, k: int) -> Path:
        return self.array_dir(job_id) / f"slot-{k}.lock"

    def ensure(self) -> Spool:
        for d in (self.tasks, self.root / "slots", self.root / "arrays"):
            d.mkdir(parents=True, exist_ok=True)
        return self

    def allocate_ids(self, count: int) -> int:
        """Reserve ``count`` consecutive job ids; return the first."""
        with locked(self.root / "counter.lock"):
            path = self.root / "counter"
            try:
                first = int(path.read_text().strip() or "1")
            except FileNotFoundError:
                first = 1
            write_text_atomic(path, f"{first + count}\n")
        return first

    def max_concurrent(self, default: int) -> int:
        cfg = read_json(self.config) or {}
        value = cfg.get("max_concurrent")
        return int(value) if isinstance(value, int) and value > 0 else default

    def array_throttle(self, job_id: str) -> int:
        try:
            return max(0, int(self.throttle(job_id).read_text().strip() or "0"))
        except (FileNotFoundError, ValueError):
            return 0


# ------------------------------------------------------------------- files
def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temp file in the same directory, fsync, rename over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, obj: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path``; None when missing or unreadable (half-created task)."""
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError, NotADirectoryError):
        return None
    return data if isinstance(data, dict) else None


# ------------------------------------------------------------------- locks
def try_lock(path: Path) -> int | None:
    """Take an exclusive flock on ``path`` without waiting; return the fd or None."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def unlock(fd: int | None) -> None:
    """Release and close a lock fd from ``try_lock`` (None is a no-op)."""
    if fd is not None:
        os.close(fd)


def locked(path: Path) -> contextlib.AbstractContextManager[int]:
    """Hold an exclusive flock on ``path`` (waiting for it) for the ``with`` body."""
    return flocked(path)
