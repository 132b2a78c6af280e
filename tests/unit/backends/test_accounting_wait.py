"""A job that left squeue while Slurm's accounting is down or behind is no news, never a
verdict: ``sdiag``'s DBD agent queue, ``settle`` (one poll's answer), and what the
reconciler does with a job the poll left out (real SQLite). Also: nodes that have not
registered with a just restarted slurmctld (sinfo's UNKNOWN), while which
``sbatch --test-only`` refuses every job."""

from __future__ import annotations

import pytest

from dethpc.backends.base import JobInfo, JobState
from dethpc.backends.slurm_parse import nodes_registering, parse_dbd_backlog
from dethpc.backends.slurm_poll import settle

SDIAG = """*******************************************************
sdiag output at Wed Nov 25 04:23:29 2026 (1795580609)
Data since      Wed Nov 25 04:22:53 2026 (1795580573)
*******************************************************
Server thread count:  3
Agent queue size:     0
Agent count:          0
Agent thread count:   0
DBD Agent queue size: {n}

Jobs submitted: 1
"""


@pytest.mark.parametrize(("text", "expected"), [
    (SDIAG.format(n=0), 0), (SDIAG.format(n=3), 3), (SDIAG.format(n=40016), 40016),
    ("Server thread count: 3\nAgent queue size: 5\n", None), ("", None),
])
def test_dbd_backlog_is_read_from_sdiag(text: str, expected: int | None) -> None:
    assert parse_dbd_backlog(text) == expected


RUNNING = JobInfo(ref="7_0", state=JobState.RUNNING)
ENDED = JobInfo(ref="7_1", state=JobState.COMPLETED, exit_code=0)


def test_settle_believes_a_caught_up_accounting() -> None:
    got = settle(["7_0", "7_1", "7_2"], {"7_0": RUNNING}, {"7_1": ENDED}, complete=True)
    assert got["7_0"] == RUNNING and got["7_1"] == ENDED
    assert got["7_2"].state == JobState.UNKNOWN


def test_settle_leaves_out_what_accounting_cannot_tell_yet() -> None:
    got = settle(["7_0", "7_1", "7_2"], {"7_0": RUNNING}, {"7_1": ENDED}, complete=False)
    assert set(got) == {"7_0", "7_1"}


def test_settle_gives_array_tasks_the_arrays_record() -> None:
    meta = JobInfo(ref="9", state=JobState.CANCELLED)
    got = settle(["9_4"], {}, {"9": meta}, complete=False)
    assert got["9_4"].state == JobState.CANCELLED and got["9_4"].ref == "9_4"


def test_a_job_left_out_of_many_polls_gets_no_verdict(tmp_path) -> None:
    """While accounting cannot tell (slurmdbd down for a minute: dozens of polls), the
    job stays live, its unknown count does not grow and its trial keeps its state; the
    same polls answering UNKNOWN would have counted a restart and resubmitted it."""
    from sqlmodel import select

    from dethpc.control.job_end import UNKNOWN_TICKS
    from dethpc.store import Store
    from dethpc.store.models import Job, Trial
    from tests.unit.control.test_reconcile_store import new_experiment, tick

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id, trial_id, ref = new_experiment(store, tmp_path)
    with store.session() as s:
        before = s.get(Trial, trial_id)
        assert before is not None
        state = before.state
    for n in range(UNKNOWN_TICKS * 10):
        tick(store, exp_id, settle([ref], {}, {}, complete=False), now=1000.0 + n)
    with store.session() as s:
        job = s.exec(select(Job)).one()
        trial = s.get(Trial, trial_id)
        assert trial is not None
        assert job.live and job.unknown_ticks == 0
        assert trial.state == state and trial.restarts == 0 and not trial.needs_job


@pytest.mark.parametrize(("states", "registering"), [
    ("unknown\nunknown\nunknown\nidle\n", True), ("unknown*\n", True),
    ("idle\nmixed\nallocated\n", False), ("down*\ndrained\n", False), ("", False),
])
def test_nodes_not_yet_registered_are_seen(states: str, registering: bool) -> None:
    assert nodes_registering(states) is registering


def paused_while(tmp_path, infos_for) -> tuple[bool, str, bool]:
    """Pause an experiment whose one job the store last saw PENDING, on a tick whose
    poll says ``infos_for(ref)``; returns (job still live, trial state, stop file)."""
    from sqlmodel import select

    from dethpc.backends.base import JobState
    from dethpc.store import Store
    from dethpc.store.models import Experiment, ExperimentState, Job, Trial
    from tests.unit.control.test_reconcile_store import new_experiment, tick

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id, trial_id, ref = new_experiment(store, tmp_path)
    with store.session() as s:
        job = s.exec(select(Job)).one()
        job.state = JobState.PENDING
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        exp.state = ExperimentState.PAUSED
        s.add(job)
        s.add(exp)
    out = tick(store, exp_id, infos_for(ref))
    with store.session() as s:
        job = s.exec(select(Job)).one()
        trial = s.get(Trial, trial_id)
        assert trial is not None
        stop = (tmp_path / "run" / "trials" / str(trial_id) / "stop").exists()
        assert (ref in out.cancel) == (not job.live)
        return job.live, trial.state.value, stop


def test_a_stop_cancels_only_a_job_this_poll_saw_pending(tmp_path) -> None:
    """A job the store last saw pending may have run since (the daemon was down, and
    this poll could not tell: accounting down): it is asked to stop through its stop
    file, never cancelled and closed as pending. One this poll saw pending is."""
    from dethpc.backends.base import JobState

    live, state, stop = paused_while(tmp_path / "a", lambda ref: settle([ref], {}, {}, False))
    assert live and stop and state != "PAUSED"
    live, state, stop = paused_while(
        tmp_path / "b", lambda ref: {ref: JobInfo(ref=ref, state=JobState.PENDING)})
    assert not live and not stop and state == "PAUSED"
