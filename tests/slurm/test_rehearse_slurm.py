"""Issue 35 item 3: rehearse a preemption, and a time limit, on a running managed trial
(``dethpc trial preempt``, ``dethpc.control.rehearse``). The rehearsal sends what Slurm
sends (the pool's early signal to the batch shell); the trial checkpoints, its job
requeues itself and resumes at the step it stopped at; the rehearsed time limit is
recorded ``time_limit``; no restart is counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dethpc.common.errors import DethpcError
from dethpc.control.rehearse import Rehearsal, Target, find_target, rehearse
from tests.slurm.fixtures.harness import (
    DaemonHarness,
    experiment_yaml,
    read_jsonl,
    steps_log,
)

BATCHES = 120
HPARAMS = {"step_time": 0.1}


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    # 20 s of grace: the rehearsal waits that long for the job to requeue itself
    h = DaemonHarness.create(tmp_path / "dethpc", debug_grace_s=20)
    yield h
    h.cancel_all_experiments()


def running_target(h: DaemonHarness, exp: int, run: int, steps: int) -> Target | None:
    """The trial's job as the store knows it once run ``run`` trained ``steps`` batches."""
    if sum(1 for r, _ in steps_log(h.trial_dir(exp)) if r == run) < steps:
        return None
    try:
        target = find_target(h.store, h.cluster, h.trial(exp).id or 0)
    except DethpcError:
        return None
    return target if target.run == run else None


def test_rehearsed_preemption_and_time_limit_requeue_resume_and_are_free(
        harness: DaemonHarness) -> None:
    h = harness
    exp = h.submit(experiment_yaml(batches=BATCHES, pool="debug", hparams=HPARAMS))
    h.wait("the trial's job", lambda: h.job_ref(exp))
    trial_dir = h.trial_dir(exp)
    outcomes = []
    for run, what in enumerate([Rehearsal.PREEMPTION, Rehearsal.TIME_LIMIT]):
        target = h.wait(f"run {run} to train", partial(running_target, h, exp, run, 15),
                        timeout=480)
        outcomes += rehearse(h.store, h.backend, [target], what)
    done = h.wait_done(exp, timeout=400)

    assert done.state == "COMPLETED", h.story(exp)
    trial = h.trial(exp)
    assert trial.restarts == 0 and trial.steps_completed == BATCHES, h.story(exp)
    exits = read_jsonl(trial_dir / "exits.jsonl")
    assert [(e["reason"], e["signal"]) for e in exits] == \
        [("preempted", "USR2"), ("time_limit", "USR2"), ("completed", "")], h.story(exp)
    # the job requeued itself (its own decision), well inside the grace
    assert [o.by_itself for o in outcomes] == [True, True], outcomes
    runs = read_jsonl(trial_dir / "runs.jsonl")
    assert [r["preempted"] for r in runs] == [True, True, False], runs
    for before, after in zip(runs, runs[1:], strict=False):
        assert after["first_batch"] == before["batches_done"], runs   # nothing lost
    rehearsals = [m for k, m in h.events(exp) if k == "rehearsal"]
    assert len(rehearsals) == 4 and "requeued itself" in rehearsals[1], rehearsals
