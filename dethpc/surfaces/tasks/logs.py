"""What a task's job leaves in its directory: its log.

Owns: ``log_path`` (``job.log`` of a notebook, shell or command job; ``server.log`` of
TensorBoard), ``follow`` (copy what the file gains until the task's job or process
has ended, then what is left). The exit code the job script writes and what it makes
of the task are ``dethpc.control.task_end``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from dethpc.store.models import Task, TaskKind


def log_name(kind: TaskKind) -> str:
    """The name of a task's log in its directory (its job writes it)."""
    return "server.log" if kind == TaskKind.TENSORBOARD else "job.log"


def log_path(task: Task) -> Path:
    return Path(task.work_dir) / log_name(task.kind)


def follow(path: Path, running: Callable[[], bool], write: Callable[[bytes], None], *,
           poll_s: float = 0.5, follow: bool = True, offset: int = 0) -> int:
    """Write the file from ``offset``; with ``follow``, keep writing what it gains until
    ``running()`` is false (then once more, for the last lines). Returns the offset."""
    while True:
        alive = running() if follow else False
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                while chunk := fh.read(65536):
                    write(chunk)
                    offset += len(chunk)
        except FileNotFoundError:
            pass
        if not alive:
            return offset
        time.sleep(poll_s)
