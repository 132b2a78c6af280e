"""What ``dethpc task list`` asks the backends (``dethpc.surfaces.tasks.registry.tasks``):
without a daemon, one poll per backend the listed tasks' jobs went to, whatever their
number; with this user's daemon running (its lock held, as ``daemon run`` holds it),
nothing about the tasks on the daemon's backend (it polls them in its tick and
records their ends), the others as without. Real SQLite in a private home; the
backends are recording ones (``daemon_kit.Recorder``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dethpc.backends.base import JobState
from dethpc.common.traits import BackendKind
from dethpc.control import service
from dethpc.control.experiments import current_user
from dethpc.store import Store
from dethpc.store.models import Task, TaskKind, TaskState
from dethpc.surfaces.tasks import registry
from tests.unit.control.daemon_kit import Recorder


@pytest.fixture
def backends(home: Path, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> dict[BackendKind, Recorder]:
    rec = {k: Recorder(tmp_path / f"spool-{k.value}") for k in BackendKind}
    monkeypatch.setattr(registry, "backend",
                        lambda cluster=None, kind=None: rec[kind or BackendKind.LOCAL])
    return rec


def add(store: Store, ref: str, backend: str) -> None:
    with store.session() as s:
        s.add(Task(kind=TaskKind.COMMAND, owner=current_user(), state=TaskState.RUNNING,
                   job_ref=ref, backend=backend, work_dir=str(registry.task_dir(int(ref)))))


def polls(rec: dict[BackendKind, Recorder]) -> dict[str, list[list[str]]]:
    return {k.value: [a for n, a in r.calls if n == "poll"] for k, r in rec.items()
            if any(n == "poll" for n, _ in r.calls)}


def states(store: Store) -> dict[str, TaskState]:
    return {t.job_ref: t.state for t in registry.tasks(store, include_ended=True)}


def test_without_a_daemon_one_poll_per_backend(backends: dict[BackendKind, Recorder]) -> None:
    store = Store()
    for ref in ("1", "2", "3", "4"):
        add(store, ref, "local")
    add(store, "9", "slurm")
    backends[BackendKind.LOCAL].states = {"1": JobState.RUNNING, "2": JobState.COMPLETED,
                                          "3": JobState.FAILED, "4": JobState.PENDING}
    backends[BackendKind.SLURM].states = {"9": JobState.RUNNING}
    assert states(store) == {"1": TaskState.RUNNING, "2": TaskState.FAILED,
                             "3": TaskState.FAILED, "4": TaskState.RUNNING,
                             "9": TaskState.RUNNING}
    assert polls(backends) == {"local": [["1", "2", "3", "4"]], "slurm": [["9"]]}


def test_with_a_daemon_its_backends_tasks_are_read_as_it_recorded(
        backends: dict[BackendKind, Recorder]) -> None:
    store = Store()
    add(store, "1", "local")
    add(store, "9", "slurm")
    backends[BackendKind.LOCAL].states = {"1": JobState.COMPLETED}   # the daemon's to see
    backends[BackendKind.SLURM].states = {"9": JobState.COMPLETED}
    with service.daemon_lock() as held:      # a daemon of this user runs (backend: local)
        assert held
        assert states(store) == {"1": TaskState.RUNNING, "9": TaskState.FAILED}
    assert polls(backends) == {"slurm": [["9"]]}
    assert states(store)["1"] is TaskState.FAILED          # no daemon: asked again
    assert polls(backends)["local"] == [["1"]]
