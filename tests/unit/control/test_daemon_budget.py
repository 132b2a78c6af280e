"""The submit budget on its own (``dethpc.control.daemon.budget``): how many trials fit
under the user's per-user limits and the refusal cap (a table), the ``limit`` event said
once, the jobs a tick submitted counted until the next poll, and a refusal over a limit.
Real SQLite, a recording backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import select

from dethpc.backends.base import JobInfo, JobRequest, JobState, Limit, PoolLimits
from dethpc.common.errors import SubmitError, SubmitLimitError
from dethpc.control.daemon.budget import SubmitBudget, fits
from dethpc.control.daemon.shared import Scope
from dethpc.control.submission import BatchLedger, Submission
from dethpc.store.models import Batch, BatchState, Job
from tests.unit.control.daemon_kit import World, world


@pytest.mark.parametrize(("wanted", "cap", "free", "per_trial", "expected"), [
    (5, None, None, 1, 5),     # no limit, no cap
    (5, 2, None, 1, 2),        # capped after a refusal
    (5, None, 3, 1, 3),        # the headroom
    (5, None, 0, 1, 0),
    (5, 4, 10, 1, 4),
    (5, None, 7, 3, 2),        # het trials: 3 jobs each
    (5, None, 2, 3, 0),
    (1, None, 9, 0, 1),        # per_trial below 1 counts as 1
])
def test_fits(wanted: int, cap: int | None, free: int | None, per_trial: int,
              expected: int) -> None:
    assert fits(wanted, cap, free, per_trial) == expected


def limited(w: World, max_submit: int, live: int) -> SubmitBudget:
    w.backend.limits = PoolLimits(qos="normal", limits=(Limit("qos", "normal",
                                                              max_submit=max_submit),))
    budget = SubmitBudget(w.store, w.cluster, w.backend, Scope())
    budget.start_tick([JobInfo(ref=f"{i}", state=JobState.RUNNING, qos="normal")
                       for i in range(live)])
    return budget


def test_room_cuts_to_the_headroom_and_says_so_once(tmp_path: Path) -> None:
    w = world(tmp_path)
    budget = limited(w, max_submit=5, live=3)
    exp, cfg = w.experiment(), w.config()
    assert budget.room(exp, cfg, 4) == 2
    assert budget.room(exp, cfg, 4) == 2
    (said,) = w.events("limit")
    assert said.startswith("2 trial(s) wait: pool 'default' is at the user's job limit")
    assert budget.room(exp, cfg, 2) == 2             # fits: nothing more said
    assert len(w.events("limit")) == 1


def test_jobs_submitted_this_tick_count_until_the_next_poll(tmp_path: Path) -> None:
    w = world(tmp_path)
    budget = limited(w, max_submit=5, live=1)
    exp, cfg = w.experiment(), w.config()
    budget.count_submitted_for(cfg, 3)
    assert budget.room(exp, cfg, 4) == 1
    budget.start_tick([])                            # the next poll: none of them live
    assert budget.room(exp, cfg, 4) == 4


def test_without_a_listing_of_the_users_jobs_only_the_cap_applies(tmp_path: Path) -> None:
    w = world(tmp_path)
    budget = SubmitBudget(w.store, w.cluster, w.backend, Scope())
    budget.start_tick(None)
    budget.cap = 2
    assert budget.room(w.experiment(), w.config(), 5) == 2
    assert w.backend.calls == []                     # no limits asked for


def refused_batch(w: World, trials: int) -> int:
    return w.add_batch(w.add_trials(trials, needs_job=False))


def ledger(w: World, batch_id: int) -> BatchLedger:
    with w.store.session() as s:
        batch = s.get(Batch, batch_id)
        assert batch is not None
        return BatchLedger(w.store, batch)


def request(batch_id: int) -> JobRequest:
    return JobRequest(name=f"b{batch_id}", comment="", script=Path("/x"), workdir=Path("/"))


def test_a_refusal_drops_the_batch_stops_this_tick_and_halves_the_cap(tmp_path: Path) -> None:
    w = world(tmp_path)
    budget = limited(w, max_submit=100, live=2)
    batch_id = refused_batch(w, 4)
    submission = Submission(w.backend, budget)
    w.backend.submit_errors = [SubmitLimitError("QOSMaxSubmitJobPerUserLimit", "no")]
    assert submission.submit(ledger(w, batch_id), request(batch_id)) == []
    with w.store.session() as s:
        batch = s.get(Batch, batch_id)
        assert batch is not None and batch.state == BatchState.FAILED
        assert list(s.exec(select(Job))) == []
    assert all(t.needs_job for t in w.trials())
    assert budget.refused and budget.cap == 2
    assert budget.room(w.experiment(), w.config(), 3) == 0     # nothing more this tick
    assert "sbatch refused the submission over a limit" in w.events("limit")[0]
    budget.start_tick([])
    assert budget.room(w.experiment(), w.config(), 3) == 2     # the cap, next tick
    budget.succeeded()
    assert budget.cap == 4


def test_a_single_trial_refused_while_nothing_is_live_is_an_error(tmp_path: Path) -> None:
    w = world(tmp_path)
    budget = limited(w, max_submit=100, live=0)
    refused_batch(w, 1)
    with pytest.raises(SubmitError, match="waiting would not help"):
        budget.refusal(w.exp_id, 1, SubmitLimitError("QOSMaxSubmitJobPerUserLimit", "no"))
