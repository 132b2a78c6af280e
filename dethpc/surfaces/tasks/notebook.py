"""``dethpc notebook start``: JupyterLab in a Slurm job, reached through an SSH tunnel.

Owns: the token (``secrets``; a 0600 file in the task's 0700 directory, read by
Jupyter through ``JUPYTER_TOKEN_FILE``, never on a command line), the job (its command
is ``python -m dethpc.surfaces.tasks.nbserve``), waiting until the server answers
``/api/status`` with the token on the node it reports, recording the endpoint
(``http://NODE:PORT/``, not the token) and the ``ssh -L`` line and URL to print.
"""

from __future__ import annotations

import getpass
import importlib.util
import json
import os
import secrets
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dethpc.common.errors import DethpcError
from dethpc.config.model import ClusterConfig, ExperimentConfig
from dethpc.store import Store
from dethpc.store.models import Task, TaskKind, TaskState
from dethpc.surfaces.tasks import interactive, nbserve, registry

#: the workstation's port in the printed ``ssh -L`` line
LOCAL_PORT = 8888


@dataclass(frozen=True)
class Started:
    task: Task
    token: str
    node: str
    port: int
    ssh_line: str
    url: str


def status(node: str, port: int, token: str | None, timeout: float = 10.0) -> int:
    """The HTTP status of ``GET /api/status`` (with ``Authorization: token T``)."""
    req = urllib.request.Request(f"http://{node}:{port}/api/status")
    if token is not None:
        req.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - http only
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def read_endpoint(task: Task) -> tuple[str, int] | None:
    try:
        data = json.loads((Path(task.work_dir) / nbserve.ENDPOINT).read_text())
        return str(data["host"]), int(data["port"])
    except (OSError, ValueError, KeyError):
        return None


def serve_argv(work_dir: Path, idle_timeout_s: int) -> list[str]:
    """What the job runs (``python`` is the job's: dethpc's, or the image's)."""
    return ["python", "-m", "dethpc.surfaces.tasks.nbserve", "--task-dir", str(work_dir),
            "--idle-timeout", str(idle_timeout_s)]


def ssh_line(node: str, port: int) -> str:
    return (f"ssh -N -L {LOCAL_PORT}:{node}:{port} "
            f"{getpass.getuser()}@{socket.gethostname()}")


def start(store: Store, cluster: ClusterConfig, *, config: ExperimentConfig,
          pool: str | None, context: Path | None, idle_timeout_s: float,
          warn: Callable[[str], None] = lambda _: None,
          on_pending: Callable[[str], None] = lambda _: None) -> Started:
    """Submit the notebook's job; return once JupyterLab answers with its token."""
    if not (config.environment.image and cluster.containers.runtime != "none") \
            and importlib.util.find_spec("jupyterlab") is None:
        raise DethpcError("jupyterlab is not installed in this Python "
                          f"({sys.executable}): pip install 'dethpc[notebook]'")
    idle = int(round(idle_timeout_s))
    prep = interactive.prepare(
        store, cluster, TaskKind.NOTEBOOK, config=config, pool_name=pool, context=context,
        command=lambda work_dir: serve_argv(work_dir, idle),
        idle_timeout_s=idle_timeout_s, warn=warn)
    w = prep.job.work_dir
    token = secrets.token_urlsafe(32)
    fd = os.open(w / nbserve.TOKEN, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token)
    task = interactive.submit(store, prep)
    assert task.id is not None

    def answers() -> bool:
        found = read_endpoint(task)
        if found is None:
            return False
        try:
            return status(found[0], found[1], token, timeout=5.0) == 200
        except OSError:
            return False

    try:
        interactive.wait_running(task, until=answers, on_pending=on_pending)
    except BaseException as exc:
        interactive.cancel(store, task, f"not started: {exc or type(exc).__name__}"[:500])
        if isinstance(exc, DethpcError):
            registry.update(store, task.id, state=TaskState.FAILED)
        raise
    found = read_endpoint(task)
    assert found is not None
    node, port = found
    task = registry.update(store, task.id, state=TaskState.RUNNING, host=node,
                           endpoint=f"http://{node}:{port}/")
    return Started(task, token, node, port, ssh_line(node, port),
                   f"http://localhost:{LOCAL_PORT}/lab?token={token}")


def live(store: Store) -> list[Task]:
    return registry.tasks(store, kind=TaskKind.NOTEBOOK)
