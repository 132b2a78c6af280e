"""The task model's operations shared by every kind: record, list (with liveness), kill.

Owns: ``Task`` rows (``dethpc.store.models.Task``), each task's owner-only directory,
and how a task's liveness is read: a local task is alive while its pid runs on its
host with the task's directory in its command line (a reused pid is not mistaken for
it); a task with a job (a shell, notebook or command; TensorBoard's ``--slurm`` job) is
alive while the backend its job went to (``Task.backend``: Slurm, or the local backend)
has it pending or running, and is stopped by that backend's cancel (``task_backend``;
``backend``: the cluster config's, Slurm's with its command timeout and retries: no
command of Slurm's is run here); a task whose job is being submitted is alive while
its submitter is, and a record its submitter left unconfirmed is adopted (or failed) by
the next list or kill that sees it (``dethpc.surfaces.tasks.ledger``). A task found dead is marked
``ended`` when listed (a notebook, shell or command job ``failed`` when the exit code
its script wrote to ``EXIT_FILE`` is not 0: ``finish``, ``dethpc.control.task_end``).
While this user's daemon runs, a list reads the states it recorded of the tasks whose
jobs went to its backend (its one batched poll: ``dethpc.control.daemon.tasks``) and
asks no backend about them; without a daemon, the listed tasks' jobs are asked of
their backends in one poll per backend. Kinds add their own start; list, finish and
kill are these.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from sqlmodel import col, select

from dethpc.backends.base import Backend, JobInfo
from dethpc.common.errors import DethpcError, NotFoundError
from dethpc.common.jobref import JobRef, job_refs
from dethpc.common.paths import dethpc_home
from dethpc.common.runner import CommandRunner
from dethpc.common.traits import BackendKind
from dethpc.config.model import ClusterConfig
from dethpc.control import task_end
from dethpc.control.experiments import current_user
from dethpc.control.task_end import gone
from dethpc.store import Store
from dethpc.store.models import Task, TaskKind, TaskState, now
from dethpc.surfaces.tasks import ledger

#: the longest socket path AF_UNIX takes (108 bytes on Linux, less a margin)
MAX_SOCKET_PATH = 100

#: the file a task's job writes its command's exit code to (``finish`` reads it)
EXIT_FILE = task_end.EXIT_FILE


def private_dir(path: Path) -> Path:
    """``path`` created (with parents) and made 0700; refused when another user owns it."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise DethpcError(f"{path} belongs to uid {st.st_uid}, not to you: refusing to "
                          "serve from it")
    path.chmod(0o700)
    return path


def task_dir(task_id: int) -> Path:
    """The task's own directory under ``DETHPC_HOME/tasks`` (0700)."""
    private_dir(dethpc_home() / "tasks")
    return private_dir(dethpc_home() / "tasks" / str(task_id))


def socket_path(task_id: int, work_dir: Path, name: str) -> Path:
    """``work_dir/name``, or, when that path is too long for AF_UNIX, the same name in a
    0700 ``/tmp/dethpc-<uid>/task-<id>`` directory."""
    path = work_dir / name
    if len(str(path)) <= MAX_SOCKET_PATH:
        return path
    short = private_dir(Path("/tmp") / f"dethpc-{os.getuid()}")
    return private_dir(short / f"task-{task_id}") / name


def create(store: Store, kind: TaskKind, experiment_ids: list[int],
           idle_timeout_s: float) -> Task:
    with store.session() as s:
        task = Task(kind=kind, owner=current_user(), host=socket.gethostname(),
                    experiment_ids=list(experiment_ids), idle_timeout_s=idle_timeout_s)
        s.add(task)
        s.flush()
        s.refresh(task)
        return task


def update(store: Store, task_id: int, **fields: object) -> Task:
    with store.session() as s:
        task = s.get(Task, task_id)
        if task is None:
            raise NotFoundError(f"task {task_id} does not exist (see `dethpc task list`)")
        for key, value in fields.items():
            setattr(task, key, value)
        if fields.get("state") in (TaskState.ENDED, TaskState.FAILED) and not task.ended_at:
            task.ended_at = now()
        s.add(task)
        return task


def get(store: Store, task_id: int) -> Task:
    with store.session() as s:
        task = s.get(Task, task_id)
        if task is None:
            raise NotFoundError(f"task {task_id} does not exist (see `dethpc task list`)")
        return task


def pid_alive(task: Task) -> bool:
    """The task's process runs here (its command line names the task's directory)."""
    if task.pid <= 0 or task.host != socket.gethostname():
        return False
    try:
        cmdline = Path(f"/proc/{task.pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return bool(task.work_dir) and task.work_dir in cmdline


def backend_kind(cluster: ClusterConfig) -> BackendKind:
    """The backend a new task's job goes to: the cluster config's (as an experiment's)."""
    kind = BackendKind.parse(cluster.backend)
    if kind is None:
        raise DethpcError(f"the cluster config ({cluster.source}) has backend "
                          f"{cluster.backend!r}; allowed: local, slurm")
    return kind


def backend(cluster: ClusterConfig | None = None, kind: BackendKind | None = None) -> Backend:
    """The backend a task's job goes through: ``kind``'s, default the cluster config's
    (``cluster``, else the config this process finds: ``site_cluster``), with that
    config's settings (Slurm: its command timeout and retries; local: its concurrency
    limit, the machine's spool under ``DETHPC_HOME``); one per such setting in a
    process (Slurm's RPCs paced as the daemon's are)."""
    cfg = cluster if cluster is not None else site_cluster()
    kind = kind or backend_kind(cfg)
    if kind is BackendKind.LOCAL:
        from dethpc.backends.factory import local_spool_dir

        return _local(str(local_spool_dir()), cfg.local_max_concurrent)
    return _slurm(cfg.command_timeout_s, cfg.command_retries)


def kind_of(task: Task) -> BackendKind:
    """The backend the task's job went to (``task_end.task_backend``)."""
    return task_end.task_backend(task)


def task_backend(task: Task) -> Backend:
    """The backend that has the task's job: liveness and cancel ask it."""
    return backend(kind=kind_of(task))


@functools.cache
def site_cluster() -> ClusterConfig:
    """The cluster config by its one precedence (``$DETHPC_CLUSTER_CONFIG``, the user's
    file, the site's; else what Slurm's answers imply, from the cache the CLI wrote)."""
    from dethpc.backends.slurm_detect import detect
    from dethpc.config import load_cluster_config

    return load_cluster_config(detect=lambda: detect(dethpc_home()))


@functools.cache
def _slurm(timeout_s: float, retries: int) -> Backend:
    from dethpc.backends.factory import slurm_backend

    return slurm_backend(runner=CommandRunner(timeout=timeout_s, retries=retries))


@functools.cache
def _local(spool_dir: str, max_concurrent: int) -> Backend:
    from dethpc.backends.local import LocalBackend

    return LocalBackend(Path(spool_dir), max_concurrent=max_concurrent)


def job_label(task: Task) -> str:
    """The task's job in the user's words: ``Slurm job 123`` or ``local job 7``."""
    word = "Slurm" if kind_of(task) is BackendKind.SLURM else kind_of(task).value
    return f"{word} job {task.job_ref}"


def job_info(task: Task) -> JobInfo | None:
    """What the task's backend says of its job (one poll); None: unknown."""
    return task_backend(task).poll([JobRef.parse(task.job_ref)]).get(task.job_ref)


def job_alive(task: Task) -> bool:
    """The task's backend still has its job (pending, running or suspended)."""
    return not gone(job_info(task))


def adopt_left(store: Store, rows: Sequence[Task]) -> int:
    """``ledger.adopt_left`` for ``rows``, each through the backend its job went to."""
    changed = 0
    for kind in dict.fromkeys(kind_of(t) for t in rows):
        changed += ledger.adopt_left(store, [t for t in rows if kind_of(t) is kind],
                                     functools.partial(backend, kind=kind))
    return changed


def alive(task: Task) -> bool | None:
    """True/False, or None when it cannot be told from here (another host, or a job
    recorded by a submitter that died and not yet adopted: ``ledger.adopt_left``)."""
    if task.job_ref:
        return job_alive(task)
    unconfirmed = ledger.submitting(task)
    if unconfirmed is not None:     # being submitted: alive while its submitter is
        return True if unconfirmed else None
    if task.host != socket.gethostname():
        return None
    return pid_alive(task)


def tasks(store: Store, *, kind: TaskKind | None = None, include_ended: bool = False,
          everyone: bool = False) -> list[Task]:
    """The user's tasks, oldest first; live ones found dead are marked ended. While a
    daemon runs, the states of the tasks whose jobs went to its backend are the ones it
    recorded from its batched poll (``dethpc.control.daemon.tasks``); the other tasks'
    jobs are asked of their backends here, one poll per backend (``job_infos``)."""
    with store.session() as s:
        q = select(Task).order_by(col(Task.id))
        if kind is not None:
            q = q.where(Task.kind == kind)
        if not everyone:
            q = q.where(Task.owner == current_user())
        rows = list(s.exec(q).all())
    if adopt_left(store, rows):   # submitters that died: their jobs
        with store.session() as s:
            rows = list(s.exec(q).all())
    jobs = [t for t in rows if t.job_ref and not t.state.is_terminal]
    tracked = daemon_backend(store) if jobs else None
    infos = job_infos([t for t in jobs if kind_of(t) is not tracked])
    out = []
    for task in rows:
        if task.state.is_terminal or task.id is None:
            dead = False
        elif task.job_ref:
            dead = kind_of(task) is not tracked and gone(infos.get(task.job_ref))
        else:
            dead = alive(task) is False
        if dead:
            task = finish(store, task)   # ENDED, or FAILED by its exit code
        if include_ended or not task.state.is_terminal:
            out.append(task)
    return out


def daemon_backend(store: Store) -> BackendKind | None:
    """The backend whose tasks' jobs a running daemon of this user polls and records
    (the cluster config's), or None when no daemon runs."""
    from dethpc.surfaces import views

    if not views.daemon_running(store, current_user()):
        return None
    return BackendKind.parse(site_cluster().backend)


def job_infos(rows: Sequence[Task]) -> dict[str, JobInfo]:
    """What the backends say of these tasks' jobs: one poll per backend they went to."""
    out: dict[str, JobInfo] = {}
    for kind in dict.fromkeys(kind_of(t) for t in rows):
        out.update(backend(kind=kind).poll(job_refs(t.job_ref for t in rows
                                                     if kind_of(t) is kind)))
    return out


def kill(store: Store, task_id: int, *, grace_s: float = 20.0) -> Task:
    """Stop a task: SIGTERM to its process (SIGKILL after ``grace_s``) or its backend's
    cancel of its job; waits until it is gone. Stopping an ended task is a no-op."""
    task = get(store, task_id)
    if task.owner != current_user():
        raise DethpcError(f"task {task_id} belongs to {task.owner!r}, not to you")
    if adopt_left(store, [task]):   # its submitter died: its job, if any
        task = get(store, task_id)
        if task.state.is_terminal:
            return task
    if ledger.submitting(task):
        raise DethpcError(f"task {task_id} is being submitted (its job id is not "
                          "recorded yet): run `dethpc task kill` again in a moment")
    if task.job_ref:
        with contextlib.suppress(DethpcError):   # already gone: nothing to cancel
            task_backend(task).cancel([JobRef.parse(task.job_ref)])
        deadline = time.monotonic() + grace_s * 3
        while job_alive(task) and time.monotonic() < deadline:
            time.sleep(0.5)
    elif task.host != socket.gethostname() and not task.state.is_terminal:
        raise DethpcError(f"task {task_id} runs on {task.host}: run `dethpc task kill "
                          f"{task_id}` there")
    elif pid_alive(task):
        _terminate(task.pid, grace_s, lambda: pid_alive(task))
    assert task.id is not None
    return update(store, task.id, state=TaskState.ENDED,
                  message=task.message or "stopped by `task kill`")


def _terminate(pid: int, grace_s: float, running: Callable[[], bool]) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``, until ``running()`` says it is gone."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                # our own child (started by this process) must be reaped to disappear
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:
                pass
            if not running():
                return
            time.sleep(0.1)


def exit_code(task: Task) -> int | None:
    """The command's exit code the job wrote, or None (cancelled, killed, not ended)."""
    return task_end.exit_code(task.work_dir)


def finish(store: Store, task: Task, *, message: str = "") -> Task:
    """Record how a task's job or process ended (``task_end.end_fields``: a notebook,
    shell or command ENDED when its exit code is 0, or it has none and was not a
    command, FAILED otherwise; TensorBoard ENDED)."""
    assert task.id is not None
    return update(store, task.id, **task_end.end_fields(task, message=message))
