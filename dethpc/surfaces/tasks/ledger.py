"""A task's job through the one submission protocol (``dethpc.control.submission``), on
the backend the cluster config names (Slurm, or the local backend): shells (Slurm only),
notebooks, one-off commands and TensorBoard's ``--slurm`` job.

Owns: the record of a task's job before its sbatch (``record``: the task row, committed
with its directory and, there, a 0600 ``SUBMITTING`` file that holds the job's comment
and is flock-held by the submitting process until the job id is in the row), the job's
name (``job_name``: ``dethpc-<kind>-<id>``) and comment (``dethpc:task=<id>:<key>``, the
key random: task ids repeat across DETHPC_HOMEs and databases, so the name alone could
find another home's job), the ``Ledger`` that confirms the row with the job id or
fails it when nothing reached Slurm (``TaskLedger``; it is also the refusal policy: a
refusal is the user's error, nothing waits), the submitter's send with its answer to an
unclear error (``send``: Slurm asked by name at once) and the adoption of a record whose
submitter died (``left``: rows without a job id whose ``SUBMITTING`` lock is free;
``adopt_left``: one ``backend.find`` by name for them). ``registry`` calls
``adopt_left`` from every command that looks at tasks (``task list``, the kinds' lists,
``task kill``).
Must not: read a task's liveness or stop it (``dethpc.surfaces.tasks.registry``), or
build a job's script (``dethpc.surfaces.tasks.interactive``, ``tensorboard``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

from dethpc.backends.base import Backend, JobRequest
from dethpc.common.errors import DethpcError, SubmitError, SubmitLimitError
from dethpc.common.flock import held
from dethpc.common.traits import BackendKind
from dethpc.control import task_end
from dethpc.control.experiments import current_user
from dethpc.control.submission import Submission, SubmissionKind, adopt
from dethpc.store import Store
from dethpc.store.models import Task, TaskKind, TaskState, now
from dethpc.surfaces.tasks import logs

#: the file in a task's directory that marks its job as recorded but not yet confirmed
SUBMITTING = "submitting"


class Refused(DethpcError):
    """sbatch refused the task's job over a limit: the user's answer (nothing waits)."""


def job_name(kind: TaskKind, task_id: int) -> str:
    """The name a task's job goes out under, and adoption finds it by."""
    return f"dethpc-{kind.value}-{task_id}"


def label(kind: TaskKind) -> str:
    """The kind's word in the user's messages."""
    return "TensorBoard" if kind is TaskKind.TENSORBOARD else kind.value


class TaskLedger:
    """A task's job, recorded in its row: confirmed with the job id, or failed."""

    exp_id = 0      # no experiment's budget is charged
    size = 1

    def __init__(self, store: Store, task_id: int, kind: TaskKind, work_dir: Path,
                 comment: str, fd: int | None = None) -> None:
        self.store, self.task_id, self.task_kind = store, task_id, kind
        self.kind = SubmissionKind(kind.value)
        self.name, self.comment, self.work_dir = job_name(kind, task_id), comment, work_dir
        self.fd = fd
        #: why nothing reached Slurm, when this process knows (its message on give_back)
        self.reason = ""

    def confirm(self, refs: Sequence[str], note: str = "", adopted: bool = False) -> None:
        """The row gets the job id (and no host until the job runs somewhere)."""
        fields: dict[str, object] = {"job_ref": refs[0], "host": ""}
        if adopted:
            fields["message"] = (f"adopted Slurm job {refs[0]}: its submitter ended before "
                                 "it recorded the job id")
        self._update(**fields)
        self.done()

    def give_back(self) -> None:
        """Slurm has no such job: the task FAILED (dethpc never submits it again). Found
        dead by another process, a job whose log is in the task's directory did run and
        has left the queue (accounting keeps no comments to find it by): the task ends
        by its exit code instead."""
        state, message = TaskState.FAILED, self.reason or (
            f"its submitter ended before it recorded the job id, and Slurm has no job "
            f"{self.name} with the comment {self.comment}: sbatch did not submit it")
        if not self.reason and (self.work_dir / logs.log_name(self.task_kind)).exists():
            code = task_end.exit_code(self.work_dir)
            state = task_end.ended_state(self.task_kind, code)
            said = f"exit code {code}" if code is not None else "no exit code"
            message = (f"its job ran ({said}) and left the queue before its submitter, "
                       "which ended, recorded the job id (Slurm's accounting keeps no "
                       "comments to find it by)")
        self._update(state=state, ended_at=now(), message=message[:500])
        self.done()

    def refusal(self, exp_id: int, size: int, exc: SubmitLimitError) -> None:
        self._update(message=f"sbatch: {exc}"[:500])
        raise Refused(f"sbatch refused the {label(self.task_kind)} job: {exc}")

    def succeeded(self) -> None:
        return None

    def done(self) -> None:
        """The record is settled: its ``SUBMITTING`` file goes, its lock is released."""
        (self.work_dir / SUBMITTING).unlink(missing_ok=True)
        self.release()

    def release(self) -> None:
        """The lock released (the file stays: the record is still unconfirmed)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _update(self, **fields: object) -> None:
        with self.store.session() as s:
            task = s.get(Task, self.task_id)
            if task is None:
                return
            for key, value in fields.items():
                setattr(task, key, value)
            s.add(task)


def _hold(path: Path, comment: str) -> int:
    """``path`` (0600) holding ``comment``, flock-held by the returned descriptor."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DethpcError(f"{path} is held by another process submitting this task") from None
    os.ftruncate(fd, 0)
    os.write(fd, comment.encode())
    return fd


def record(store: Store, kind: TaskKind, experiment_ids: list[int], idle_timeout_s: float,
           make_dir: Callable[[int], Path],
           backend: BackendKind = BackendKind.SLURM) -> tuple[Task, TaskLedger]:
    """The task's row (STARTING, this host, its directory ``make_dir(id)``, the backend
    its job goes to), committed only once its ``SUBMITTING`` file is held: no other
    process sees the row without it."""
    fd = None
    try:
        with store.session() as s:
            task = Task(kind=kind, owner=current_user(), host=socket.gethostname(),
                        experiment_ids=list(experiment_ids), idle_timeout_s=idle_timeout_s,
                        backend=backend.value)
            s.add(task)
            s.flush()
            assert task.id is not None
            work_dir = make_dir(task.id)
            task.work_dir = str(work_dir)
            comment = f"dethpc:task={task.id}:{secrets.token_hex(4)}"
            fd = _hold(work_dir / SUBMITTING, comment)
            s.add(task)
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    return task, TaskLedger(store, task.id, kind, work_dir, comment, fd)


def send(ledger: TaskLedger, backend: Backend, request: JobRequest) -> None:
    """Submit ``request`` under the ledger's name and comment, recorded already; the row
    has its job id on return. A refusal over a limit fails the task (``Refused``), as
    sbatch's other refusals (``SubmitError``) do; any other error of sbatch's (a
    timeout, say: the job may exist) is answered at once by asking Slurm for the job by
    name: adopted when found, the task FAILED when not, the record left for the next
    command that looks when Slurm cannot be asked."""
    word = label(ledger.task_kind)
    ledger.reason = "sbatch answered no job id"
    try:
        if Submission(backend, ledger).submit(ledger, request):
            return
    except Refused:
        raise
    except SubmitError as exc:      # sbatch said no (a bad partition, ...): nothing ran
        ledger.reason = f"sbatch: {exc}"[:500]
        ledger.give_back()
        raise DethpcError(f"sbatch refused the {word} job: {exc}") from None
    except DethpcError as exc:
        ledger.reason = f"sbatch: {exc}"[:500]
        try:
            if adopt(backend, [ledger]):
                return
        except DethpcError:
            ledger.release()
        raise DethpcError(f"sbatch refused the {word} job: {exc}") from None
    raise DethpcError(f"sbatch refused the {word} job: it answered no job id")


def submitting(task: Task) -> bool | None:
    """Whether the task's job is recorded but not confirmed: True while its submitter
    holds the lock, False when it died (the record is ``left``), None when there is no
    such record."""
    if task.job_ref or not task.work_dir or task.state.is_terminal:
        return None
    return held(Path(task.work_dir) / SUBMITTING)


def left(store: Store, rows: Sequence[Task]) -> list[TaskLedger]:
    """The ledgers of ``rows`` whose submitter died before it confirmed them, each lock
    now held by this process (a second adopter leaves them alone)."""
    out = []
    for task in rows:
        if submitting(task) is not False or task.id is None:
            continue
        path = Path(task.work_dir) / SUBMITTING
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            comment = os.pread(fd, 4096, 0).decode(errors="replace").strip()
        except BlockingIOError:
            os.close(fd)
            continue
        if not comment:      # written in the same instant as its lock: never empty
            os.close(fd)
            continue
        out.append(TaskLedger(store, task.id, task.kind, Path(task.work_dir), comment, fd))
    return out


def adopt_left(store: Store, rows: Sequence[Task], backend: Callable[[], Backend]) -> int:
    """The records of ``rows`` their submitters left unconfirmed: adopted by name and
    comment with one ``find`` when Slurm has the job, failed when it has not. Returns
    how many rows changed (0: no Slurm call was made)."""
    ledgers = left(store, rows)
    if not ledgers:
        return 0
    try:
        adopt(backend(), ledgers)
    finally:
        for ledger in ledgers:
            with contextlib.suppress(OSError):
                ledger.release()
    return len(ledgers)
