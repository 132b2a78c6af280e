"""A trial's job held by an administrator (issue 34 item 4): dethpc notices it, says so
in ``describe`` (who holds it, that only an operator may release it), waits without
failing anything, and the trial completes once the hold is lifted.

The job is kept pending with ``--begin=now+600`` so that root's ``scontrol hold`` meets
it before it starts; root then releases it and moves its start to now.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dethpc.surfaces.views import describe_experiment
from tests.slurm.fixtures.harness import DaemonHarness, experiment_yaml

pytestmark = pytest.mark.spanning


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc")
    yield h
    h.cancel_all_experiments()


def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True)


def test_an_admin_hold_is_described_and_the_trial_goes_on_once_released(
        harness: DaemonHarness) -> None:
    exp = harness.submit(experiment_yaml(batches=5, sbatch_args=["--begin=now+600"]))
    ref = harness.wait("the trial's job to be submitted", lambda: harness.job_ref(exp))

    def trial() -> dict[str, Any]:
        return describe_experiment(harness.store, exp)["trials"][0]

    harness.wait("the job to wait for its begin time",
                 lambda: trial()["pending_reason"] == "BeginTime")
    assert trial()["hold"] is None
    scontrol("hold", ref)
    held = harness.wait("describe to show the hold", lambda: trial()["hold"])
    assert held.startswith(f"job {ref} is held by an administrator (JobHeldAdmin)"), held
    assert "only an operator may" in held
    assert trial()["state"] != "ERROR" and harness.experiment(exp).state.value == "ACTIVE"
    scontrol("release", ref)
    scontrol("update", f"JobId={ref}", "StartTime=now")
    done = harness.wait_done(exp, timeout=300)
    assert done.state.value == "COMPLETED", harness.events(exp)
    assert trial()["hold"] is None
