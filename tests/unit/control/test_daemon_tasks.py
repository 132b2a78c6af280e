"""The task phase (``dethpc.control.daemon.tasks``): the live tasks' jobs ride in the
tick's one backend poll with the trials' jobs, whatever their number, and a task
whose job the poll found gone is recorded ended or failed by the exit code its job
wrote. The rules (``dethpc.control.task_end``) as a table. Real SQLite, a recording
backend (``daemon_kit.Recorder``), full daemon ticks."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import select

from dethpc.backends.base import JobInfo, JobState
from dethpc.control import task_end
from dethpc.control.daemon import Daemon
from dethpc.control.daemon.shared import Scope, TickStats
from dethpc.control.daemon.tasks import TaskWatch
from dethpc.store.models import (
    BatchState,
    Experiment,
    ExperimentState,
    Task,
    TaskKind,
    TaskState,
)
from tests.unit.control.daemon_kit import World, world


def add_tasks(w: World, n: int, *, kind: TaskKind = TaskKind.COMMAND, backend: str = "local",
              state: TaskState = TaskState.RUNNING, first: int = 500,
              owner: str = "me") -> list[str]:
    """``n`` tasks with jobs ``<first+i>`` on ``backend``; their refs."""
    refs = [str(first + i) for i in range(n)]
    with w.store.session() as s:
        for ref in refs:
            work = w.cluster.runs_root.parent / f"task-{ref}"
            work.mkdir(parents=True, exist_ok=True)
            s.add(Task(kind=kind, owner=owner, state=state, job_ref=ref, backend=backend,
                       work_dir=str(work)))
    return refs


def polls(w: World) -> list[list[str]]:
    return [list(args) for name, args in w.backend.calls if name == "poll"]


@pytest.mark.parametrize(("tasks", "trials"), [(0, 3), (4, 0), (6, 5), (1, 40)])
def test_live_tasks_and_trials_cost_one_poll_per_tick(tmp_path: Path, tasks: int,
                                                      trials: int) -> None:
    w = world(tmp_path)
    set_state(w, ExperimentState.PAUSED)     # open, its jobs polled; nothing new submitted
    rows = w.add_trials(trials, needs_job=False)
    if trials:
        w.add_batch(rows, ref="700_{i}", live=True, batch_state=BatchState.SUBMITTED)
    task_refs = add_tasks(w, tasks)
    w.backend.states = {r: JobState.RUNNING for r in task_refs}
    w.backend.states.update({f"700_{i}": JobState.RUNNING for i in range(trials)})
    daemon = Daemon(w.store, w.cluster, w.backend)
    for _ in range(3):
        w.backend.calls.clear()
        daemon.tick()
        assert len(polls(w)) == 1
        assert set(polls(w)[0]) >= {*task_refs, *(f"700_{i}" for i in range(trials))}
    with w.store.session() as s:
        assert {t.state for t in s.exec(select(Task))} <= {TaskState.RUNNING}


def set_state(w: World, state: ExperimentState) -> None:
    with w.store.session() as s:
        exp = s.get(Experiment, w.exp_id)
        assert exp is not None
        exp.state = state
        s.add(exp)


@pytest.mark.parametrize(("tasks", "expected_polls"), [(0, 0), (3, 1)])
def test_without_an_open_experiment_the_live_tasks_are_polled_once_a_tick(
        tmp_path: Path, tasks: int, expected_polls: int) -> None:
    w = world(tmp_path)
    set_state(w, ExperimentState.COMPLETED)
    refs = add_tasks(w, tasks)
    w.backend.states = {r: JobState.RUNNING for r in refs}
    daemon = Daemon(w.store, w.cluster, w.backend)
    w.backend.calls.clear()
    stats = daemon.tick()
    assert len(polls(w)) == expected_polls and stats.experiments == 0
    if tasks:
        assert sorted(polls(w)[0]) == sorted(refs)


def test_a_task_whose_job_left_is_recorded_by_its_exit_code(tmp_path: Path) -> None:
    w = world(tmp_path)
    set_state(w, ExperimentState.PAUSED)
    ok, bad, none, tb, running = (add_tasks(w, 1, first=f)[0] for f in (1, 2, 3, 4, 5))
    with w.store.session() as s:
        tb_row = s.exec(select(Task).where(Task.job_ref == tb)).one()
        tb_row.kind = TaskKind.TENSORBOARD
        s.add(tb_row)
        work = {t.job_ref: Path(t.work_dir) for t in s.exec(select(Task))}
    (work[ok] / task_end.EXIT_FILE).write_text("0\n")
    (work[bad] / task_end.EXIT_FILE).write_text("3\n")
    w.backend.states = {ok: JobState.COMPLETED, bad: JobState.FAILED,
                        running: JobState.RUNNING}   # none, tb: no longer known
    stats = Daemon(w.store, w.cluster, w.backend).tick()
    assert stats.changed
    with w.store.session() as s:
        got = {t.job_ref: (t.state, t.message, t.ended_at is not None)
               for t in s.exec(select(Task))}
    assert got == {
        ok: (TaskState.ENDED, "exit code 0", True),
        bad: (TaskState.FAILED, "exit code 3", True),
        none: (TaskState.FAILED, "the job ended without an exit code (cancelled, or out "
                                 "of time?)", True),
        tb: (TaskState.ENDED, "its process is gone", True),
        running: (TaskState.RUNNING, "", False)}


def test_the_watch_asks_only_its_backends_live_jobs_in_its_scope(tmp_path: Path) -> None:
    w = world(tmp_path)
    mine = add_tasks(w, 2, first=10)
    add_tasks(w, 1, first=20, backend="slurm")                   # another backend's
    add_tasks(w, 1, first=30, state=TaskState.ENDED)             # ended
    add_tasks(w, 1, first=40, owner="other")                     # another user's
    with w.store.session() as s:
        s.add(Task(kind=TaskKind.TENSORBOARD, owner="me", pid=123))   # a local process
    from dethpc.common.traits import BackendKind

    watch = TaskWatch(w.store, Scope("me"), BackendKind.LOCAL)
    assert sorted(watch.refs()) == mine
    assert sorted(TaskWatch(w.store, Scope(None), BackendKind.LOCAL).refs()) == [*mine, "40"]
    assert TaskWatch(w.store, Scope(None), None).refs() == []
    # an answer that is not fresh decides nothing; a fresh one ends what left
    assert watch.record({}, TickStats(), fresh=False) == 0
    watch.refs()
    assert watch.record({mine[0]: JobInfo(mine[0], JobState.RUNNING)}, TickStats()) == 1


@pytest.mark.parametrize(("kind", "code", "state", "message"), [
    (TaskKind.COMMAND, "0", TaskState.ENDED, "exit code 0"),
    (TaskKind.COMMAND, "2", TaskState.FAILED, "exit code 2"),
    (TaskKind.COMMAND, None, TaskState.FAILED,
     "the job ended without an exit code (cancelled, or out of time?)"),
    (TaskKind.SHELL, None, TaskState.ENDED, "ended"),
    (TaskKind.NOTEBOOK, "1", TaskState.FAILED, "exit code 1"),
    (TaskKind.TENSORBOARD, "1", TaskState.ENDED, "its process is gone"),
])
def test_end_fields(tmp_path: Path, kind: TaskKind, code: str | None, state: TaskState,
                    message: str) -> None:
    if code is not None:
        (tmp_path / task_end.EXIT_FILE).write_text(code)
    fields = task_end.end_fields(Task(kind=kind, work_dir=str(tmp_path)), at=5.0)
    assert fields == {"state": state, "message": message, "ended_at": 5.0}
    assert "ended_at" not in task_end.end_fields(Task(kind=kind, work_dir=str(tmp_path),
                                                      ended_at=1.0))
