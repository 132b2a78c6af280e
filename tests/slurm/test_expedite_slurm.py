"""``--requeue=expedite`` where a pool asks for it (issue 34 item 4), on Slurm 25.11.

A pool with ``requeue: expedite`` submits its trials with ``--requeue=expedite`` (the dev
cluster's 25.11 slurm.conf allows it: ``SlurmctldParameters=enable_expedited_requeue``).
Measured here: a batch job so submitted whose script exits non-zero is requeued by
Slurm and *held* (``REQUEUE_HOLD``, "job requeued in held state", priority 0), whatever
25.11's release notes say of epilogs. A trial whose first run fails after its step-4
checkpoint: the daemon counts the failed run (restarts 1), releases the held job
(``scontrol release``), the same job id runs again at once and resumes from the
checkpoint to the end. Without the release the trial waits on the hold forever.
Runs only in the 25.11 lane (22.05 has no expedited requeue).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.fixtures.harness import DaemonHarness, read_jsonl

pytestmark = pytest.mark.parametrize("slurm_release", ["25.11"], indirect=True,
                                     ids=["slurm-25.11"])

TOY = Path(__file__).resolve().parents[1] / "fixtures" / "toy"


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
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    shutil.copy(TOY / "train.py", ctx / "train.py")
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
