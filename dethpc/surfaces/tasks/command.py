"""``dethpc cmd run``: a one-off command as a batch job with the trial environment.

Owns: starting the job (``dethpc.surfaces.tasks.interactive`` builds and submits it), following
its log until it ends and reading the command's exit code (the ``exit-code`` file the
job script writes), then recording the task ENDED (0) or FAILED.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from dethpc.common.errors import DethpcError
from dethpc.config.model import ClusterConfig, ExperimentConfig
from dethpc.store import Store
from dethpc.store.models import Task, TaskKind, TaskState
from dethpc.surfaces.tasks import interactive, logs, registry


def start(store: Store, cluster: ClusterConfig, *, config: ExperimentConfig,
          pool: str | None, context: Path | None, argv: Sequence[str],
          warn: Callable[[str], None] = lambda _: None) -> Task:
    """Submit the command's job; the task (its job id recorded)."""
    if not argv:
        raise DethpcError("COMMAND: name the command to run, after `--` "
                          "(e.g. dethpc cmd run -- python3 prep.py)")
    prep = interactive.prepare(store, cluster, TaskKind.COMMAND, config=config,
                               pool_name=pool, context=context, command=argv, warn=warn)
    return interactive.submit(store, prep)


def follow(store: Store, task: Task, write: Callable[[bytes], None],
           poll_s: float = 0.5) -> tuple[Task, int]:
    """Copy the job's log until the job ends; (the task, recorded), and the exit code the
    CLI returns (the command's; 1 when the job ended without one)."""
    def running() -> bool:
        nonlocal task
        state, nodes, _ = interactive.job_state(task)
        if state == "RUNNING" and not task.host and task.id is not None:
            from dethpc.common.hostlist import expand_hostlist

            task = registry.update(store, task.id, state=TaskState.RUNNING,
                                   host=expand_hostlist(nodes)[0] if nodes else "")
        return bool(state)

    logs.follow(logs.log_path(task), running, write, poll_s=poll_s)
    task = registry.finish(store, task)
    code = registry.exit_code(task)
    return task, 1 if code is None else code
