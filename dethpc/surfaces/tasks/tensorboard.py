"""``dethpc tensorboard start|list|stop``: TensorBoard as a task.

Owns: resolving experiments and trials into derive sources, starting the serving
process (``dethpc.surfaces.tasks.tbserve``) in the background on this host -- or, with
``slurm=True``, rendering a small job script that runs it and submitting it to the
cluster config's backend (Slurm's, or the local one) through the one submission
protocol (``dethpc.surfaces.tasks.ledger``: the task's row recorded first) -- waiting
until its Unix socket answers, recording the task, and the ``ssh -L`` line to reach it.
The store is opened here only; the serving process reads trials' files.
"""

from __future__ import annotations

import getpass
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sqlmodel import col, select

from dethpc.backends.base import JobRequest
from dethpc.common.errors import DethpcError
from dethpc.config import parse_stored
from dethpc.config.model import ClusterConfig
from dethpc.control.experiments import current_user, get_experiment
from dethpc.jobs.directives import server_directives
from dethpc.store import Store
from dethpc.store.models import Task, TaskKind, TaskState, Trial
from dethpc.surfaces.tasks import ledger, logs, registry
from dethpc.surfaces.tasks.derive import Source

SOCKET = "tensorboard.sock"
#: the local port the printed ``ssh -L`` line forwards
LOCAL_PORT = 6006


@dataclass(frozen=True)
class Started:
    task: Task
    ssh_line: str
    url: str


def sources(store: Store, experiment_ids: list[int], trial_ids: list[int]) -> list[Source]:
    """One source per experiment (the user's own), limited to ``trial_ids`` when given;
    every trial id must belong to one of the experiments."""
    if not experiment_ids:
        raise DethpcError("EXP: name at least one experiment id")
    out = []
    with store.session() as s:
        trial_exp: dict[int, int] = {t.id or 0: t.experiment_id for t in s.exec(
            select(Trial).where(col(Trial.id).in_(trial_ids))).all()} if trial_ids else {}
    for tid in trial_ids:
        if trial_exp.get(tid) not in experiment_ids:
            raise DethpcError(f"--trial {tid}: not a trial of experiment(s) "
                              f"{', '.join(map(str, experiment_ids))}")
    for exp_id in dict.fromkeys(experiment_ids):
        exp = get_experiment(store, exp_id)
        if exp.owner and exp.owner != current_user():
            raise DethpcError(f"experiment {exp_id} belongs to {exp.owner!r}, not to you")
        unit = "batches"
        try:
            cfg = parse_stored(exp.config_yaml)
            if cfg.searcher.max_length is not None:
                unit = cfg.searcher.max_length.unit.value
        except Exception:  # noqa: BLE001,S110 - an old config: the curves still come
            pass
        mine = frozenset(t for t, e in trial_exp.items() if e == exp_id)
        out.append(Source(exp_id, Path(exp.run_dir), unit,
                          (mine or frozenset({-1})) if trial_ids else None))
    return out


def serve_argv(sock: Path, work_dir: Path, srcs: list[Source], idle_timeout_s: float,
               refresh_s: float) -> list[str]:
    argv = [sys.executable, "-m", "dethpc.surfaces.tasks.tbserve", "--socket", str(sock),
            "--logdir", str(work_dir / "logs"), "--idle-timeout", f"{idle_timeout_s:g}",
            "--refresh", f"{refresh_s:g}"]
    for src in srcs:
        argv += ["--source", src.to_arg()]
    return argv


def job_script(argv: list[str], work_dir: Path, partition: str = "",
               name: str = "dethpc-tensorboard") -> str:
    """The ``--slurm`` job (named ``name``: ``dethpc-tensorboard-<task id>``, its
    ``ledger.job_name``): one task, one CPU, the serving process in the foreground,
    the partition's default time limit (it normally ends itself when idle)."""
    lines = ["#!/bin/bash", *(f"#SBATCH {d}" for d in server_directives(
        name, str(work_dir / logs.log_name(TaskKind.TENSORBOARD)), partition))]
    lines += ["umask 077", "exec " + shlex.join(argv), ""]
    return "\n".join(lines)


def start(store: Store, experiment_ids: list[int], trial_ids: list[int], *,
          idle_timeout_s: float = 3600.0, refresh_s: float = 10.0, slurm: bool = False,
          partition: str = "", wait_s: float = 120.0,
          cluster: ClusterConfig | None = None) -> Started:
    """Start TensorBoard over the experiments; returns once its socket answers. A
    ``slurm`` job's sbatch runs under ``cluster``'s command timeout and retries."""
    if idle_timeout_s < 0:
        raise DethpcError(f"--idle-timeout: {idle_timeout_s:g} is negative; allowed: "
                          "minutes >= 0 (0: never)")
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        raise DethpcError("tensorboard is not installed in this Python "
                          f"({sys.executable}): pip install 'dethpc[tensorboard]'")
    srcs = sources(store, experiment_ids, trial_ids)
    exp_ids = [s.experiment_id for s in srcs]
    record = None
    if slurm:    # the row is the job's record (``ledger``): held until the job id is in it
        cfg = cluster if cluster is not None else registry.site_cluster()
        kind = registry.backend_kind(cfg)
        task, record = ledger.record(store, TaskKind.TENSORBOARD, exp_ids, idle_timeout_s,
                                     registry.task_dir, backend=kind)
    else:
        task = registry.create(store, TaskKind.TENSORBOARD, exp_ids, idle_timeout_s)
    assert task.id is not None
    work_dir = registry.task_dir(task.id)
    # a directory left by an earlier database's task of the same id: start fresh
    shutil.rmtree(work_dir / "logs", ignore_errors=True)
    sock = registry.socket_path(task.id, work_dir, SOCKET)
    argv = serve_argv(sock, work_dir, srcs, idle_timeout_s, refresh_s)
    log = work_dir / logs.log_name(TaskKind.TENSORBOARD)
    log.unlink(missing_ok=True)   # an earlier database's task's: its presence says a job ran
    fields: dict[str, object] = {"work_dir": str(work_dir), "endpoint": str(sock)}
    proc = None
    if record is not None:
        registry.update(store, task.id, **fields)
        script = work_dir / "tensorboard.sbatch"
        try:
            script.write_text(job_script(argv, work_dir, partition, name=record.name))
        except OSError as exc:
            record.reason = f"cannot write {script}: {exc}"[:500]
            record.give_back()
            raise DethpcError(record.reason) from None
        ledger.send(record, registry.backend(cfg, kind), JobRequest(
            name=record.name, comment=record.comment, script=script, workdir=Path.cwd(),
            output=log))
        fields = {}
    else:
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    start_new_session=True, close_fds=True)
        fields["pid"] = proc.pid
    task_id = task.id
    task = registry.update(store, task_id, **fields)
    try:
        _wait_ready(task, sock, proc, log, wait_s)
    except DethpcError as exc:
        registry.kill(store, task_id, grace_s=5)
        registry.update(store, task_id, state=TaskState.FAILED, message=str(exc)[:500])
        raise
    if slurm:
        fields = {"host": _job_node(task)}
    task = registry.update(store, task_id, state=TaskState.RUNNING, **fields)
    return Started(task, ssh_line(task), f"http://localhost:{LOCAL_PORT}/")


def ssh_line(task: Task) -> str:
    """The command a workstation runs to forward its port to the task's socket."""
    login = socket.gethostname()
    user = getpass.getuser()
    if task.job_ref and task.host and task.host != socket.gethostname():
        return (f"ssh -N -L {LOCAL_PORT}:{task.endpoint} -J {user}@{login} "
                f"{user}@{task.host}")
    return f"ssh -N -L {LOCAL_PORT}:{task.endpoint} {user}@{task.host or login}"


def _job_node(task: Task) -> str:
    info = registry.job_info(task)
    return info.nodes if info is not None else ""


def _wait_ready(task: Task, sock: Path, proc: subprocess.Popen[bytes] | None, log: Path,
                wait_s: float) -> None:
    """Until the socket accepts a connection and answers HTTP (``/data/runs``)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise DethpcError(f"TensorBoard exited ({proc.returncode}) before serving: "
                              f"{_tail(log)}")
        if task.job_ref and not registry.job_alive(task) and not sock.exists():
            raise DethpcError(f"the TensorBoard job {task.job_ref} ended before serving: "
                              f"{_tail(log)}")
        if sock.exists() and answers(sock):
            return
        time.sleep(0.2)
    raise DethpcError(f"TensorBoard did not answer on {sock} within {wait_s:g} s: "
                      f"{_tail(log)}")


def answers(sock: Path, path: str = "/data/runs", timeout: float = 10.0) -> bool:
    try:
        return get(sock, path, timeout)[0] == 200
    except OSError:
        return False


def get(sock: Path, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """An HTTP GET over the Unix socket: (status, body)."""
    import http.client

    class Conn(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(str(sock))

    conn = Conn("localhost", timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _tail(log: Path, lines: int = 5) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def live(store: Store) -> list[Task]:
    return registry.tasks(store, kind=TaskKind.TENSORBOARD)
