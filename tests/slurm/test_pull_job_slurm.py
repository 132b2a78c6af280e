"""``containers.pull: job`` on the dev cluster: the daemon submits one pre-pull job per
image and the trials at once with ``--dependency=afterok`` on it; a trial starts only
after the pull succeeded, and a failed pull fails the experiment with the runtime's
words (its dependent jobs are killed by Slurm, ``--kill-on-invalid-dep``).

The runtime is the stand-in ``apptainer`` of tests/unit/jobs/test_containers.py, on the
PATH the jobs inherit (Apptainer cannot be installed here): this proves dethpc's pull
jobs, dependencies and failure handling on real Slurm, not that Apptainer pulls.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dethpc.jobs.imagepull import pull_job
from tests.slurm.fixtures.harness import DaemonHarness, wait_until
from tests.slurm.fixtures.standin_runtime import standin_pull_site


@pytest.fixture
def site(tmp_path: Path, slurm_cluster: Any,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[DaemonHarness, Path]]:
    h, bin_dir = standin_pull_site(tmp_path, monkeypatch)
    yield h, bin_dir
    (bin_dir / "log" / "go").touch()
    h.cancel_all_experiments()


def experiment() -> dict[str, Any]:
    return {"name": "pull-job", "entrypoint": "python3 -c pass",
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
            "resources": {"resource_pool": "debug"}, "max_restarts": 0,
            "environment": {"image": "org/img:1"}}


def sacct(job: str, fields: str) -> list[str]:
    return subprocess.run(["sacct", "-n", "-P", "-X", "-j", job, "-o", fields],
                          capture_output=True, text=True, check=False).stdout.split()


def recorded(job: str, field: str) -> str | None:
    """A time accounting has recorded for ``job`` (its ``Start`` or ``End``); None while
    sacct shows none yet or ``Unknown`` (slurmdbd not told yet: f34 compared 'Unknown')."""
    seen = sacct(job, field)
    return seen[0] if seen and seen[0][:1].isdigit() else None


def test_trials_wait_for_the_pull_job(site: tuple[DaemonHarness, Path],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    h, bin_dir = site
    monkeypatch.setenv("STANDIN_HOLD", "1")
    exp = h.submit(experiment())
    ref = h.wait("the trial's job", lambda: h.job_ref(exp))
    pj = pull_job(h.cluster.runs_root, h.cluster.containers, "org/img:1")
    pull = pj.job_id()
    assert pull is not None
    wait_until("the pull to start", lambda: any((bin_dir / "log").glob("pulling.*")) or None,
               timeout=120)

    def held() -> list[str] | None:
        seen = subprocess.run(["squeue", "-h", "-j", ref, "-o", "%T %r"], capture_output=True,
                              text=True, check=True).stdout.split()
        assert seen[:1] == ["PENDING"], seen                 # never started before the pull
        return seen if seen == ["PENDING", "Dependency"] else None   # ("None" until seen)

    wait_until("Slurm to hold the trial on its dependency", held, timeout=60)
    (bin_dir / "log" / "go").touch()
    done = h.wait_done(exp, timeout=240)
    assert done.state == "COMPLETED", h.events(exp)
    ended = wait_until("accounting of the pull's end", lambda: recorded(pull, "End"),
                       timeout=60)
    started = wait_until("accounting of the trial's start", lambda: recorded(ref, "Start"),
                         timeout=60)
    print(f"pull job {pull} ended {ended}, trial job {ref} started {started}")
    assert started >= ended, (ended, started)
    assert list((Path(h.cluster.containers.sif_cache or "")).glob("*.sif"))


def test_failed_pull_job_fails_the_experiment(site: tuple[DaemonHarness, Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    h, _ = site
    monkeypatch.setenv("STANDIN_FAIL", "1")
    exp = h.submit(experiment())
    ref = h.wait("the trial's job", lambda: h.job_ref(exp))
    done = h.wait_done(exp, timeout=240)
    print(f"failed pull: {done.state}: {done.message}")
    assert done.state in ("ERROR", "CANCELED"), h.events(exp)
    assert "manifest unknown" in done.message or any(
        "manifest unknown" in m for _, m in h.events(exp)), h.events(exp)
    # the dependent job never ran (a job cancelled while pending never reaches sacct)
    wait_until("the trial job to leave the queue", lambda: subprocess.run(
        ["squeue", "-h", "-j", ref, "-o", "%T"], capture_output=True, text=True,
        check=False).stdout.strip() in ("", "CANCELLED") or None, timeout=120)
    assert not sacct(ref, "Start") or sacct(ref, "Start") == ["None"], sacct(ref, "Start")
