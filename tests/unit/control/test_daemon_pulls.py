"""The image gate on its own (``dethpc.control.daemon.pulls``), ``containers.pull: job``:
the sbatch arguments it hands the submit (a table), one pre-pull job per image submitted
once, its outcome, and the tick's look at the pulls trials wait on. Real SQLite, a
recording backend with Slurm's traits (job dependencies); no runtime is run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dethpc.backends.base import JobInfo, JobState
from dethpc.config.model import ClusterConfig, ContainerSettings, ResourcePool
from dethpc.control.daemon import Daemon
from dethpc.control.daemon.budget import SubmitBudget
from dethpc.control.daemon.pulls import (
    ImageGate,
    PullLedger,
    dependency_args,
    placement_args,
)
from dethpc.control.daemon.shared import Scope
from dethpc.jobs.containers import image_path
from dethpc.jobs.imagepull import pull_job
from dethpc.store.models import ExperimentState, TrialState
from tests.unit.control.daemon_kit import Recorder, World, world

IMAGE = "docker://example/train:1"


@pytest.mark.parametrize(("job_ids", "args"), [
    ([], ()),
    (["7"], ("--dependency=afterok:7", "--kill-on-invalid-dep=yes")),
    (["7", "9"], ("--dependency=afterok:7:9", "--kill-on-invalid-dep=yes")),
])
def test_dependency_args(job_ids: list[str], args: tuple[str, ...]) -> None:
    assert dependency_args(job_ids) == args


@pytest.mark.parametrize(("pool", "args"), [
    (ResourcePool(name="p"), []),
    (ResourcePool(name="p", partition="gpu", account="lab"),
     ["--partition=gpu", "--account=lab"]),
])
def test_placement_args(pool: ResourcePool, args: list[str]) -> None:
    assert placement_args(pool) == args


def pulling_world(tmp_path: Path, **cfg: Any) -> tuple[World, ImageGate]:
    """An experiment in ``IMAGE`` (``cfg`` merged into its config), created without a
    runtime (none is installed here); the gate sees the site's apptainer with
    ``pull: job``."""
    w = world(tmp_path, slurm_traits=True, environment={"image": IMAGE}, **cfg)
    settings = ContainerSettings(runtime="apptainer", sif_cache=tmp_path / "sif",
                                 pull="job")
    cluster = ClusterConfig(runs_root=w.cluster.runs_root, containers=settings,
                            pools=w.cluster.pools)
    gate = ImageGate(w.store, cluster, w.backend, python="python3", tag="t",
                     clock=lambda: 5.0, policy=SubmitBudget(w.store, cluster, w.backend,
                                                            Scope()))
    return w, gate


def test_a_pre_pull_job_is_submitted_once_and_the_trials_depend_on_it(
        tmp_path: Path) -> None:
    w, gate = pulling_world(tmp_path)
    cfg = w.config()
    deps = gate.ready(w.exp_id, cfg)
    assert deps == ("--dependency=afterok:101", "--kill-on-invalid-dep=yes")
    assert w.backend.names() == ["submit", "poll"]
    assert w.backend.requests[0].comment == f"dethpc:pull={IMAGE}"
    assert w.events("pull") == [f"pre-pull job 101 for {IMAGE}"]
    assert gate.ready(w.exp_id, cfg) == deps                 # recorded: not again
    assert w.backend.names() == ["submit", "poll", "poll"]


def test_an_image_in_the_cache_needs_no_job(tmp_path: Path) -> None:
    w, gate = pulling_world(tmp_path)
    sif = image_path(gate.cluster.containers, IMAGE)
    sif.parent.mkdir(parents=True)
    sif.write_text("sif")
    assert gate.ready(w.exp_id, w.config()) == ()
    assert w.backend.calls == []


def test_a_killed_daemons_pull_job_that_cached_the_image_is_still_adopted(
        tmp_path: Path) -> None:
    """A daemon killed after its pre-pull job's sbatch left the job's name, no id; the
    job cached the image before a daemon ran again. The image needs no job, and the
    record still ends with the job's id (one find), not with a name nothing resolves."""
    w, gate = pulling_world(tmp_path)
    pj = pull_job(gate.cluster.runs_root, gate.cluster.containers, IMAGE)
    ledger = PullLedger(w.store, pj, IMAGE, w.exp_id, "dethpc-pull-t-x")
    ledger.record()
    w.backend.found = [JobInfo(ref="77", state=JobState.COMPLETED, name="dethpc-pull-t-x")]
    sif = image_path(gate.cluster.containers, IMAGE)
    sif.parent.mkdir(parents=True)
    sif.write_text("sif")
    assert gate.ready(w.exp_id, w.config()) == ()
    assert w.backend.calls == [("find", ["dethpc-pull-t-x"])]
    assert pj.job_id() == "77" and not pj.submitting.exists()
    assert w.events("pull") == [f"pre-pull job 77 for {IMAGE} (adopted after a restart)"]
    assert gate.ready(w.exp_id, w.config()) == ()            # resolved: no find again
    assert w.backend.names() == ["find"]


def test_a_pull_that_failed_before_any_trial_ran_ends_the_experiment(tmp_path: Path) -> None:
    w, gate = pulling_world(tmp_path)
    w.add_trials(2)
    gate.ready(w.exp_id, w.config())
    w.backend.states["101"] = JobState.FAILED
    assert gate.ready(w.exp_id, w.config()) is None
    exp = w.experiment()
    assert exp.state == ExperimentState.ERROR and exp.ended_at == 5.0
    assert "could not be pulled (job 101 ended" in exp.message
    assert [t.state for t in w.trials()] == [TrialState.ERROR] * 2


def test_the_tick_looks_at_watched_pulls_and_fails_their_experiments(tmp_path: Path) -> None:
    w, gate = pulling_world(tmp_path)
    gate.check()
    assert w.backend.calls == []                             # nothing watched: no poll
    gate.ready(w.exp_id, w.config())
    w.backend.calls.clear()
    gate.check()
    assert w.backend.calls == [("poll", ["101"])]             # pending: watched still
    w.backend.states["101"] = JobState.FAILED
    gate.check()
    assert w.experiment().state == ExperimentState.STOPPING_KILLED
    assert gate.pull_watch == {}
    w.backend.calls.clear()
    gate.check()
    assert w.backend.calls == []


def test_a_trial_job_killed_by_its_failed_pull_fails_the_experiment_with_the_pull(
        tmp_path: Path) -> None:
    """Slurm kills a dependent job only after its pre-pull job ended. A tick that sees
    the trials' jobs cancelled must see that pull's end too, and fail the experiment with
    the runtime's words, not as "cancelled" (CI once polled the pull just before it
    failed and the trials just after: the experiment ended with no word of the pull)."""
    w, gate = pulling_world(tmp_path, max_restarts=0, searcher={
        "name": "single", "metric": "validation_loss", "max_length": 8})
    daemon = Daemon(w.store, gate.cluster, w.backend)
    daemon.tick()                                            # the pull job, the trials
    assert w.backend.requests[0].comment == f"dethpc:pull={IMAGE}"
    trial_refs = [r for r in w.backend.states if r != "101"]
    assert trial_refs
    backend: Recorder = w.backend
    plain_poll = Recorder.poll

    def poll(refs: Sequence[str]) -> dict[str, JobInfo]:
        if any(r in trial_refs for r in refs):               # the pull fails meanwhile
            backend.states["101"] = JobState.FAILED
            backend.states.update({r: JobState.CANCELLED for r in trial_refs})
        return plain_poll(backend, refs)

    backend.poll = poll                                      # type: ignore[method-assign]
    for _ in range(3):
        daemon.tick()
    exp = w.experiment()
    # stopped by the gate (STOPPING_KILLED, then CANCELED as the jobs are gone), as the
    # slurm tier's test_failed_pull_job_fails_the_experiment allows
    assert exp.state in (ExperimentState.ERROR, ExperimentState.CANCELED), exp.state
    assert "could not be pulled (job 101 ended" in exp.message, (exp.message, w.events())
