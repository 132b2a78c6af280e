"""How a task's end is read: the exit code its job wrote, and the state it makes.

Owns: which backend has a task's job (``task_backend``), when a polled job has left
(``gone``), the file a task's job writes its command's exit code to (``EXIT_FILE``),
reading it (``exit_code``), what it makes of the task (``ended_state``: ENDED or FAILED)
and the row's fields once its job or process is gone (``end_fields``, with the message
a list shows). Both readers of a task's end use it: the daemon's task phase
(``dethpc.control.daemon.tasks``, from its one batched poll) and the task commands'
own look when no daemon runs (``dethpc.surfaces.tasks.registry``).
Must not: call a backend or open the store (its callers do).
"""

from __future__ import annotations

from pathlib import Path

from dethpc.backends.base import JobInfo
from dethpc.common.traits import BackendKind
from dethpc.store.models import Task, TaskKind, TaskState, now

#: the file a task's job writes its command's exit code to
EXIT_FILE = "exit-code"
#: the kinds whose job script writes ``EXIT_FILE`` (TensorBoard's job runs its server)
EXIT_CODE_KINDS = (TaskKind.COMMAND, TaskKind.NOTEBOOK, TaskKind.SHELL)


def task_backend(task: Task) -> BackendKind:
    """The backend a task's job went to (a row without one: Slurm's, the only one that
    ran tasks' jobs before ``Task.backend`` was recorded)."""
    return BackendKind.parse(task.backend) or BackendKind.SLURM


def gone(info: JobInfo | None) -> bool:
    """Whether a polled job has left: its backend no longer knows it, or it ended."""
    return info is None or info.state.is_terminal


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


def end_fields(task: Task, *, message: str = "", at: float | None = None) -> dict[str, object]:
    """The row's fields once the task's job or process is gone: a notebook, shell or
    command by the exit code its job wrote (``ended_state``), TensorBoard ENDED; the
    message ``message``, else what the exit code says (else the task's own, else that
    its process is gone); ``ended_at`` unless the row has one."""
    if task.kind in EXIT_CODE_KINDS:
        code = exit_code(task.work_dir)
        if code is None and task.kind == TaskKind.COMMAND:
            default = "the job ended without an exit code (cancelled, or out of time?)"
        else:
            default = f"exit code {code}" if code is not None else "ended"
        state = ended_state(task.kind, code)
    else:
        state, default = TaskState.ENDED, task.message or "its process is gone"
    fields: dict[str, object] = {"state": state, "message": message or default}
    if not task.ended_at:
        fields["ended_at"] = now() if at is None else at
    return fields
