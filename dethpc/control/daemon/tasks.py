"""The task phase: the jobs of interactive tasks and TensorBoard, in the tick's one poll.

Owns: ``TaskWatch`` — the refs of the live tasks' jobs that went to this daemon's
backend (a notebook, shell or command; TensorBoard's ``--slurm`` job), handed to the
poll phase so that they ride in the same backend call as the trials' batches and the
pool workers (Slurm: the one ``squeue``, paced under the site's RPC rate limit like
every other command of the daemon's backend), and, from that poll's answer, the end of
each task whose job has left the queue recorded in its row (``task_end.end_fields``:
ENDED or FAILED by the exit code its job wrote). ``dethpc task list`` reads these
states while a daemon runs (``dethpc.surfaces.tasks.registry.tasks``).
Must not: call the backend (the poll phase does), judge a task's end itself
(``dethpc.control.task_end``), or touch tasks without a job (a local TensorBoard process
is alive by its pid, on its own host: the task commands look there).
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlmodel import col, select

from dethpc.backends.base import JobInfo
from dethpc.common.traits import BackendKind
from dethpc.control import task_end
from dethpc.control.daemon.shared import Scope, TickStats
from dethpc.control.task_end import gone, task_backend
from dethpc.store import Store
from dethpc.store.models import Task, TaskState

LIVE = [s for s in TaskState if not s.is_terminal]


class TaskWatch:
    def __init__(self, store: Store, scope: Scope, backend: BackendKind | None) -> None:
        #: ``backend`` None: the daemon's backend is neither (a test's): no task is its
        self.store, self.scope, self.backend = store, scope, backend
        #: the refs handed to the last poll, by task id (only those are judged)
        self._asked: dict[int, str] = {}
        #: tasks whose end this daemon recorded (for tests and benchmarks)
        self.ended = 0
        #: the live tasks with a job: each tick's read, built once
        self._live = select(Task).where(col(Task.state).in_(LIVE), Task.job_ref != "")
        if scope.owner is not None:
            self._live = self._live.where(Task.owner == scope.owner)

    def live(self) -> list[Task]:
        """The live tasks with a job on this daemon's backend."""
        if self.backend is None:
            return []
        with self.store.read() as s:
            return [t for t in s.exec(self._live) if task_backend(t) is self.backend]

    def refs(self) -> list[str]:
        """The live tasks' job refs this daemon's backend has (one read of the rows)."""
        self._asked = {t.id: t.job_ref for t in self.live() if t.id is not None}
        return list(dict.fromkeys(self._asked.values()))

    def record(self, infos: Mapping[str, JobInfo], stats: TickStats, *,
               fresh: bool = True) -> int:
        """The end of each task asked about whose job the poll (``infos``) found gone,
        in its row (a row another process ended meanwhile is left as it is). An answer
        that is not ``fresh`` (the poll phase's last one stood) decides nothing."""
        asked, self._asked = self._asked, {}
        ended = [tid for tid, ref in asked.items() if fresh and gone(infos.get(ref))]
        if not ended:
            return 0
        n = 0
        with self.store.session() as s:
            for task in s.exec(select(Task).where(col(Task.id).in_(ended))):
                if task.state.is_terminal:
                    continue
                for key, value in task_end.end_fields(task).items():
                    setattr(task, key, value)
                s.add(task)
                n += 1
        self.ended += n
        stats.changed = stats.changed or n > 0
        return n
