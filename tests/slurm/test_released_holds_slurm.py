"""Holds that Slurm places mechanically, released by the daemon (issue 34 item 4), on
Slurm 25.11.

``--requeue=expedite`` where a pool asks for it: a pool with ``requeue: expedite``
submits its trials with ``--requeue=expedite`` (the dev cluster's 25.11 slurm.conf allows
it: ``SlurmctldParameters=enable_expedited_requeue``). Measured here: a batch job so
submitted whose script exits non-zero is requeued by Slurm and *held*
(``REQUEUE_HOLD``, "job requeued in held state", priority 0), whatever 25.11's release
notes say of epilogs. A trial whose first run fails after its step-4 checkpoint: the
daemon counts the failed run (restarts 1), releases the held job (``scontrol
release``), the same job id runs again at once and resumes from the checkpoint to the
end.

A failed launch: the dev cluster's Prolog fails the trial job's first launch (a test
asks for it: ``DevClusterLayout.fail_next_prolog``); Slurm drains that node ("Prolog
error") and holds the job ("launch failed requeued held"). The daemon releases it, and
it runs on another node (counted: restarts 1).

Without the release either trial waits on its hold forever. Runs only in the 25.11 lane
(22.05 has no expedited requeue, and its nodes run no Prolog).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dethpc.devcluster.cluster import DevCluster
from tests.slurm.fixtures.harness import DaemonHarness, read_jsonl, toy_context

pytestmark = pytest.mark.parametrize("slurm_release", ["25.11"], indirect=True,
                                     ids=["slurm-25.11"])

@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any, slurm_release: str) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc", more_pools={
        "expedite": {"partition": "debug", "requeue": "expedite"}})
    yield h
    h.cancel_all_experiments()


def job_fields(ref: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "-o", "show", "job", ref], capture_output=True,
                         text=True, check=False).stdout
    return dict(w.split("=", 1) for w in out.split() if "=" in w)


def test_a_job_held_by_its_expedited_requeue_is_released_and_resumes(
        harness: DaemonHarness, tmp_path: Path) -> None:
    h = harness
    ctx = toy_context(tmp_path)
    exp = h.submit({
        "name": "expedite", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": 3, "step_time": 0.2, "fail_at": 5, "save_every": 2},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 12}},
        "max_restarts": 2, "resources": {"resource_pool": "expedite"}}, context=ctx)
    ref = h.wait("the trial's job", lambda: h.job_ref(exp))
    script = next(p for p in (h.trial_dir(exp).parents[1]).rglob("*.sbatch"))
    assert "#SBATCH --requeue=expedite\n" in script.read_text()
    done = h.wait_done(exp, timeout=300)
    trial = h.trial(exp)
    assert done.state.value == "COMPLETED" and trial.restarts == 1, h.story(exp)
    assert trial.steps_completed == 12, h.story(exp)
    assert job_fields(ref).get("Restarts") == "1"          # the same job, run again
    exits = read_jsonl(h.trial_dir(exp) / "exits.jsonl")
    assert [(e["reason"], e["job"], e["restart"]) for e in exits] == [
        ("error", ref, 0), ("completed", ref, 1)], exits
    events = h.events(exp)
    assert any(k == "restart" and "run 0 ended error and Slurm requeued the job" in m
               for k, m in events), events


def drained_by_prolog() -> list[str]:
    out = subprocess.run(["sinfo", "-R", "-h", "-o", "%N|%E"], capture_output=True,
                         text=True, check=False).stdout
    return [line.split("|")[0] for line in out.splitlines() if "Prolog error" in line]


def test_a_job_held_after_a_failed_launch_is_released_and_runs_elsewhere(
        harness: DaemonHarness, tmp_path: Path) -> None:
    h = harness
    ctx = toy_context(tmp_path)
    flag = DevCluster().layout.fail_next_prolog
    flag.touch()
    try:
        exp = h.submit({
            "name": "launch-fails", "entrypoint": "python3 train.py",
            "hyperparameters": {"x": 3, "step_time": 0.1},
            "searcher": {"name": "single", "metric": "validation_loss",
                         "max_length": {"batches": 6}},
            "max_restarts": 2, "resources": {"resource_pool": "debug"}}, context=ctx)
        ref = h.wait("the trial's job", lambda: h.job_ref(exp))
        done = h.wait_done(exp, timeout=300)
        trial = h.trial(exp)
        bad = drained_by_prolog()
        print(f"launch failure: {done.state.value}, restarts {trial.restarts}, "
              f"drained {bad}, events {h.events(exp)[-4:]}")
        assert not flag.exists()                       # the Prolog did fail a launch
        assert len(bad) == 1, bad                      # ... on one node, which Slurm drained
        assert done.state.value == "COMPLETED" and trial.restarts == 1, h.story(exp)
        assert job_fields(ref).get("Restarts") == "1"  # the same job, released
        exits = read_jsonl(h.trial_dir(exp) / "exits.jsonl")
        # the failed launch never ran the script: the one record is the run elsewhere
        assert [(e["reason"], e["restart"]) for e in exits] == [("completed", 1)], exits
        assert bad[0] not in exits[0]["nodes"], (bad, exits)
        assert any(k == "restart" and "run 0 never started: its launch failed" in m
                   for k, m in h.events(exp)), h.events(exp)
    finally:
        flag.unlink(missing_ok=True)
        for node in drained_by_prolog():
            subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                           check=False, capture_output=True)
