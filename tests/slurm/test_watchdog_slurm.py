"""Issue 35 item 1, the hang watchdog, on the dev cluster.

A trial whose first run stops in a ``time.sleep`` loop after a few steps (no metrics,
no heartbeat; its job stays RUNNING): the daemon declares it hung once it was idle
``slurm.watchdog.max_idle_s`` (15 s), asks its ranks for their stacks (they are in the
trial log), ends the job, counts a restart with reason ``hung``, and the next job
resumes from the last checkpoint and completes.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.fixtures.harness import DaemonHarness, job_log, read_jsonl

pytestmark = pytest.mark.slurm

TOY = Path(__file__).resolve().parents[1] / "fixtures" / "toy"
MAX_IDLE_S = 15


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc")
    yield h
    h.cancel_all_experiments()


def test_a_trial_stuck_in_a_sleep_loop_is_ended_with_its_stacks_and_resumes(
        harness: DaemonHarness, tmp_path: Path) -> None:
    h = harness
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    shutil.copy(TOY / "train.py", ctx / "train.py")
    exp = h.submit({
        "name": "hang", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": 3, "step_time": 0.2, "hang_at": 5, "save_every": 2},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 12}},
        "max_restarts": 2,
        "resources": {"resource_pool": "debug"},
        "slurm": {"watchdog": {"max_idle_s": MAX_IDLE_S}}}, context=ctx)
    ref = h.wait("the trial's job", lambda: h.job_ref(exp))
    trial_dir = h.trial_dir(exp)
    hung = h.wait("the watchdog to declare the trial hung", lambda: (
        trial_dir / "hung.json").exists() and json.loads((trial_dir / "hung.json").read_text()),
        timeout=240, story_of=exp)
    print(f"hung.json: {hung}")
    assert hung["job"] == ref and hung["run"] == 0 and hung["max_idle_s"] == MAX_IDLE_S
    # within max_idle plus about a tick (the harness ticks once a second; a loaded
    # machine's tick takes longer)
    assert MAX_IDLE_S <= hung["idle_s"] <= MAX_IDLE_S + 8, hung
    done = h.wait_done(exp, timeout=300)
    trial = h.trial(exp)
    assert done.state == "COMPLETED" and trial.restarts == 1, h.story(exp)
    assert trial.steps_completed == 12, h.story(exp)
    exits = read_jsonl(trial_dir / "exits.jsonl")
    # the daemon's record of the hung run, then the batch shell's own (its steps were
    # killed, it was not: it read hung.json), then the new job's
    assert [(e["reason"], e["job"]) for e in exits] == [
        ("hung", ref), ("hung", ref), ("completed", h.job_ref(exp))], h.story(exp)
    assert exits[1]["code"] == 137 and exits[1]["nodes"], exits
    log = job_log(trial_dir)
    # the stacks of the hung run, written by the trial process on the watchdog's signal
    assert "toy: hanging at step 5" in log, log[-3000:]
    dump = log[log.index("toy: hanging at step 5"):]
    assert "most recent call first" in dump and "train.py" in dump, dump[-3000:]
    assert "toy: resumed at step 4" in log, log[-3000:]
    events = h.events(exp)
    assert any(k == "hung" and "no progress for" in m for k, m in events), events
