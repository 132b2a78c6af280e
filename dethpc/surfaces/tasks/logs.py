"""What a task's job leaves in its directory: its log and its exit code.

Owns: ``log_path`` (``job.log`` of a notebook, shell or command job; ``server.log`` of
TensorBoard), ``follow`` (copy what the file gains until the task's job or process
has ended, then what is left), the exit code the job script writes (``EXIT_FILE``,
``exit_code``) and what it makes of the task (``ended_state``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from dethpc.store.models import Task, TaskKind, TaskState

#: the file a task's job writes its command's exit code to
EXIT_FILE = "exit-code"


def exit_code(work_dir: str | Path) -> int | None:
    """The command's exit code the job wrote, or None (cancelled, killed, not ended)."""
    try:
        return int((Path(work_dir) / EXIT_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def ended_state(kind: TaskKind, code: int | None) -> TaskState:
    """How a task whose job ended stands: ENDED when its exit code is 0 (or it has none
    and is not a command), FAILED otherwise."""
    if code or (code is None and kind == TaskKind.COMMAND):
        return TaskState.FAILED
    return TaskState.ENDED


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
