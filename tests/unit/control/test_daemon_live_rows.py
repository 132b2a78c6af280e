"""The tick's one read of the live jobs' rows (``daemon.poll.live_rows``): the poll takes
its refs from it and the reconcile its experiment's rows, where each read the live jobs
apart (35,000 rows each per tick at 50,000 trials, bench/tick_scale)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import select

from dethpc.backends.base import JobState
from dethpc.control.daemon import Daemon
from dethpc.control.daemon.poll import live_rows
from dethpc.control.daemon.shared import Scope, TickStats
from dethpc.control.reconcile.rows import TickRows
from dethpc.store.models import BatchState, Experiment, Job, TrialState
from tests.unit.control.daemon_kit import world


def test_the_shared_rows_are_the_reconciles_own(tmp_path: Path) -> None:
    w = world(tmp_path)
    trials = w.add_trials(6)
    w.add_batch(trials[:4], ref="700_{i}", live=True)
    w.add_batch(trials[4:], ref="701_{i}", live=False)   # ended: not live
    with w.store.session() as s:
        trial = s.get(type(trials[0]), trials[1].id)
        assert trial is not None
        trial.state, trial.steps_completed = TrialState.RUNNING, 3
        s.add(trial)
    with w.store.session() as s:
        shared = live_rows(s, Scope())
        exp = s.get(Experiment, w.exp_id)
        assert exp is not None
        own = TickRows(s, exp, {}, 1000.0)._live_rows()
    assert sorted(shared) == [w.exp_id]
    assert sorted(shared[w.exp_id]) == sorted(own) and len(own) == 4
    with w.store.session() as s:
        assert live_rows(s, Scope(owner="someone else")) == {}


def test_a_tick_reads_the_live_rows_once(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    w = world(tmp_path)
    trials = w.add_trials(4)
    w.add_batch(trials, ref="700_{i}", live=True, batch_state=BatchState.SUBMITTED)
    w.backend.states.update({"700_0": JobState.RUNNING, "700_1": JobState.PENDING,
                             "700_2": JobState.PENDING, "700_3": JobState.PENDING})
    own_reads: list[int] = []
    real = TickRows._live_rows

    def counted(self: TickRows) -> list:  # type: ignore[type-arg]
        own_reads.append(self.exp_id)
        return real(self)

    monkeypatch.setattr(TickRows, "_live_rows", counted)
    daemon = Daemon(w.store, w.cluster, w.backend)
    daemon.tick()
    assert own_reads == []                     # the reconcile took the poll's rows
    assert sorted(r.ref or "" for r in daemon.poller.live[w.exp_id]) == \
        [f"700_{i}" for i in range(4)]
    with w.store.session() as s:               # and acted on them: the start recorded
        states = {j.ref: j.state for j in s.exec(select(Job).where(Job.live == True))}  # noqa: E712
    assert states["700_0"] == JobState.RUNNING
    daemon.reconciling.run([w.exp_id], {}, TickStats())
    assert own_reads == [w.exp_id]             # without the rows: read as before
