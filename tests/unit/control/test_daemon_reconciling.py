"""The reconcile phase and its housekeeping on their own
(``dethpc.control.daemon.reconciling``, ``.housekeeping``): each experiment reconciled in
turn, the refs they want cancelled gathered, the checkpoints one doomed removed before
the next is reconciled, a failing experiment failed without stopping the others; the
fast path's lease checks and cancel; a doomed checkpoint marked DELETED only once its
directory is gone. The reconciler is replaced by a scripted one; real SQLite."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from dethpc.common.errors import CommandError, DethpcError
from dethpc.control.daemon import housekeeping, reconciling
from dethpc.control.daemon.cancel import Canceller
from dethpc.control.daemon.housekeeping import CheckpointDeleter
from dethpc.control.daemon.reconciling import Reconciling
from dethpc.control.daemon.shared import TickStats
from dethpc.control.reconcile.searcher_memo import Kept
from dethpc.control.worker_pool_tend import WorkerPoolTender
from dethpc.store.models import Checkpoint, CheckpointState, Experiment, ExperimentState
from tests.unit.control.daemon_kit import CountingGuard, World, world


@dataclass
class Out:
    cancel: list[str] = field(default_factory=list)
    changed: bool = False
    delete: dict[str, str] = field(default_factory=dict)
    searched: dict[str, int] = field(default_factory=dict)
    release: list[str] = field(default_factory=list)


class Script:
    """Stands in for ``ExperimentReconciler``: answers each experiment as scripted (an
    ``Out``, or an exception to raise) and logs what it was asked."""

    def __init__(self, answers: dict[int, Out | Exception], log: list[Any]) -> None:
        self.answers, self.log = answers, log

    def __call__(self, s: Any, exp: Any, infos: Any, now: float, fast: bool = False,
                 cfg: Any = None, memo: Any = None, live_rows: Any = None,
                 state: Any = None) -> Any:
        script = self

        class One:
            def run(self) -> Out:
                return script.answer("run", exp.id)

            def run_fast(self, trial_ids: set[int]) -> Out:
                return script.answer("run_fast", exp.id, sorted(trial_ids))

            def kept(self) -> Kept:   # the memo keeps it; no searcher is made here
                return Kept(exp.config_yaml, "", None, None)  # type: ignore[arg-type]

        return One()

    def answer(self, *call: Any) -> Out:
        self.log.append(call)
        out = self.answers[call[1]]
        if isinstance(out, Exception):
            raise out
        return out


class Deleter(CheckpointDeleter):
    def __init__(self, w: World, log: list[Any]) -> None:
        super().__init__(w.store)
        self.log = log

    def delete(self, doomed: dict[str, str]) -> None:
        self.log.append(("delete", sorted(doomed)))


def phase(w: World, answers: dict[int, Out | Exception],
          monkeypatch: pytest.MonkeyPatch) -> tuple[Reconciling, list[Any], CountingGuard]:
    log: list[Any] = []
    monkeypatch.setattr(reconciling, "ExperimentReconciler", Script(answers, log))
    guard = CountingGuard()
    pools = WorkerPoolTender(w.store, w.cluster, w.backend, python="python3", tag="t",
                       budget=None, files=None)  # type: ignore[arg-type]
    canceller = Canceller(w.store, w.backend, pools, guard)
    return Reconciling(w.store, lambda: 1.0, guard, canceller, Deleter(w, log)), log, guard


def test_each_experiment_in_turn_its_checkpoints_removed_before_the_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = world(tmp_path)
    p, log, _ = phase(w, {w.exp_id: Out(["5_1", "5_0"], True, {"u1": "/x"})}, monkeypatch)
    stats = TickStats()
    assert p.run([w.exp_id], {}, stats) == ["5_1", "5_0"]
    assert log == [("run", w.exp_id), ("delete", ["u1"])]
    assert stats.changed and w.backend.calls == []          # the cancel is not this phase's


def test_a_failing_experiment_is_failed_and_the_others_go_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = world(tmp_path)
    with w.store.session() as s:
        exp = s.get(Experiment, w.exp_id)
        assert exp is not None
        twin = Experiment(**{k: v for k, v in exp.model_dump().items() if k != "id"})
        s.add(twin)
        s.flush()
        twin_id = twin.id
    assert twin_id is not None
    p, log, _ = phase(w, {w.exp_id: DethpcError("bad stored config"),
                          twin_id: Out(["7_0"])}, monkeypatch)
    stats = TickStats()
    assert p.run([w.exp_id, twin_id], {}, stats) == ["7_0"]
    assert stats.errors == [f"experiment {w.exp_id}: bad stored config"]
    assert w.experiment().state == ExperimentState.STOPPING_KILLED
    assert [c[0] for c in log] == ["run", "run", "delete"]


def test_the_fast_path_checks_the_lease_and_cancels_what_a_stop_leaves_pending(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = world(tmp_path)
    p, log, guard = phase(w, {w.exp_id: Out(["5_0", "5_0"], True)}, monkeypatch)
    assert p.fast({w.exp_id: {3, 1}}) is True
    assert log == [("run_fast", w.exp_id, [1, 3]), ("delete", [])]
    assert w.backend.calls == [("cancel", ["5_0"])] and guard.checks == 2


def test_the_fast_path_logs_errors_and_leaves_them_to_the_tick(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = world(tmp_path)
    p, _, guard = phase(w, {w.exp_id: Out(["5_0"], False)}, monkeypatch)
    w.backend.cancel_error = CommandError(["scancel"], 1, "", "away")
    assert p.fast({w.exp_id: {1}}) is False                 # no raise
    p2, _, _ = phase(w, {w.exp_id: DethpcError("x")}, monkeypatch)
    assert p2.fast({w.exp_id: {1}, 999: {2}}) is False      # 999: no such experiment
    assert w.experiment().state == ExperimentState.ACTIVE


def checkpoint(w: World, uuid: str, path: Path, state: CheckpointState) -> None:
    (t,) = w.add_trials(1)
    assert t.id is not None
    with w.store.session() as s:
        s.add(Checkpoint(uuid=uuid, experiment_id=w.exp_id, trial_id=t.id, path=str(path),
                         state=state))


def states(w: World) -> dict[str, CheckpointState]:
    with w.store.session() as s:
        return {c.uuid: c.state for c in s.exec(select(Checkpoint))}


def test_doomed_checkpoints_are_removed_then_marked_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = world(tmp_path)
    dirs = {u: tmp_path / "ck" / u for u in ("a", "b", "c")}
    for d in dirs.values():
        d.mkdir(parents=True)
        (d / "state").write_text("x")
    checkpoint(w, "a", dirs["a"], CheckpointState.DELETING)
    checkpoint(w, "b", dirs["b"], CheckpointState.DELETING)
    checkpoint(w, "c", dirs["c"], CheckpointState.COMPLETED)
    real = housekeeping.shutil.rmtree
    monkeypatch.setattr(housekeeping.shutil, "rmtree",        # "b" cannot be removed
                        lambda p, ignore_errors=False: None if p == str(dirs["b"])
                        else real(p, ignore_errors=ignore_errors))
    CheckpointDeleter(w.store).delete({u: str(d) for u, d in dirs.items()})
    assert not dirs["a"].exists() and dirs["b"].exists()
    assert states(w) == {"a": CheckpointState.DELETED, "b": CheckpointState.DELETING,
                         "c": CheckpointState.COMPLETED}   # only DELETING rows change


def test_a_daemon_killed_after_the_removal_leaves_them_deleting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = world(tmp_path)
    d = tmp_path / "ck" / "a"
    d.mkdir(parents=True)
    checkpoint(w, "a", d, CheckpointState.DELETING)

    class Killed(Exception):
        pass

    def kill(pid: int, sig: int) -> None:
        raise Killed

    monkeypatch.setenv("DETHPC_FAULT_POINT", "after_gc_rmtree")
    monkeypatch.setattr("dethpc.control.daemon.shared.os.kill", kill)
    with pytest.raises(Killed):
        CheckpointDeleter(w.store).delete({"a": str(d)})
    assert not d.exists() and states(w) == {"a": CheckpointState.DELETING}
