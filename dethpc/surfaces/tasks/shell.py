"""``dethpc shell start|open``: an interactive shell in a Slurm allocation.

Owns: the holder job (``dethpc.surfaces.tasks.interactive`` renders it: it runs the startup hook
and then waits, ending after the idle timeout with no attached step), attaching to it
from this node with ``srun --jobid=J --overlap --pty`` (a shell, ``bash -i``, or the
given command) in the context copy with the task's environment, and what happens when
the shell exits (the job is cancelled and the task ENDED, unless kept).
The attach settings (cwd, environment, container prefix) are kept in the task's 0600
``attach.json`` so ``shell open`` can attach again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from dethpc.common.errors import DethpcError
from dethpc.config.model import ClusterConfig, ExperimentConfig
from dethpc.store import Store
from dethpc.store.models import Task, TaskKind, TaskState
from dethpc.surfaces.tasks import interactive, registry

ATTACH = "attach.json"
#: what an attached shell runs: ``bash -i`` (not ``-l``: a login shell's /etc/profile
#: would reset PATH and drop the task's python)
SHELL = ["bash", "-i"]


def srun_argv(job_ref: str, cwd: Path, prefix: Sequence[str] | None,
              command: Sequence[str], *, pty: bool) -> list[str]:
    """The step that attaches: one task on the allocation's first node, sharing its
    resources (``--overlap``)."""
    argv = ["srun", f"--jobid={job_ref}", "--overlap", "--nodes=1", "--ntasks=1",
            f"--chdir={cwd}", "--quiet"]
    if pty:
        argv.append("--pty")
    return [*argv, *(prefix or []), *(command or SHELL)]


def attach_env(task: Task) -> dict[str, str]:
    """This process's environment with the task's (and its startup hook's exports)."""
    data = _attach(task)
    pairs = data["env"] if isinstance(data["env"], list) else []
    env = {**os.environ, **{str(k): str(v) for k, v in pairs}}
    env["PATH"] = f"{data['python_bin']}:{env.get('PATH', '')}"
    hook_env = Path(task.work_dir) / f"{interactive.HOOK_ENV}.0"
    if hook_env.is_file():
        for kv in hook_env.read_bytes().split(b"\0"):
            if b"=" in kv:
                k, v = kv.decode(errors="replace").split("=", 1)
                env[k] = v
    return env


def _attach(task: Task) -> dict[str, object]:
    try:
        data: dict[str, object] = json.loads((Path(task.work_dir) / ATTACH).read_text())
        return data
    except (OSError, ValueError) as exc:
        raise DethpcError(f"task {task.id}: cannot read its attach settings ({exc})") from None


def start(store: Store, cluster: ClusterConfig, *, config: ExperimentConfig,
          pool: str | None, context: Path | None, idle_timeout_s: float,
          warn: Callable[[str], None] = lambda _: None,
          on_pending: Callable[[str], None] = lambda _: None) -> Task:
    """Submit the holder job and wait until it runs (its startup hook done)."""
    prep = interactive.prepare(store, cluster, TaskKind.SHELL, config=config,
                               pool_name=pool, context=context, command=[],
                               idle_timeout_s=idle_timeout_s, warn=warn)
    w = prep.job.work_dir
    fd = os.open(w / ATTACH, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"cwd": str(prep.job.cwd), "env": prep.job.env,
                   "python_bin": prep.job.python_bin, "prefix": prep.prefix}, fh)
    task = interactive.submit(store, prep)
    assert task.id is not None
    try:
        node = interactive.wait_running(
            task, until=lambda: (w / interactive.READY_FILE).exists(), on_pending=on_pending)
    except BaseException as exc:
        interactive.cancel(store, task, f"not started: {exc or type(exc).__name__}"[:500])
        if isinstance(exc, DethpcError):
            registry.update(store, task.id, state=TaskState.FAILED)
        raise
    return registry.update(store, task.id, state=TaskState.RUNNING, host=node)


def attach(store: Store, task: Task, command: Sequence[str] = ()) -> int:
    """Run the shell (or ``command``) in the allocation, in the foreground; its exit code."""
    if task.kind != TaskKind.SHELL:
        raise DethpcError(f"TASK: {task.id} is a {task.kind.value} task, not a shell")
    if task.state.is_terminal or not registry.job_alive(task):
        raise DethpcError(f"shell {task.id} has ended (see `dethpc task list --all`)")
    data = _attach(task)
    prefix = data.get("prefix")
    argv = srun_argv(task.job_ref, Path(str(data["cwd"])),
                     [str(p) for p in prefix] if isinstance(prefix, list) else None,
                     command, pty=sys.stdin.isatty())
    return subprocess.run(argv, env=attach_env(task), check=False).returncode


def live(store: Store) -> list[Task]:
    return registry.tasks(store, kind=TaskKind.SHELL)
