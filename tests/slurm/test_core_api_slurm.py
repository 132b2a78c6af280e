"""Determined 0.38 Core API scripts (examples/core_api: ``import dethpc as det`` is their
only dethpc line) run through the daemon on the real dev cluster with their own configs.

* start, metrics, random search, distributed (Determined's torch launcher entrypoint,
  ``slots_per_trial: 2`` -> one rank on each of two nodes, ``allgather`` across them) and
  the PyTorch Trainer complete, with metrics and checkpoints in the store; Core API
  collectives without torch (``from_deepspeed()`` through Determined's DeepSpeed launcher
  entrypoint) cross the two nodes over dethpc's TCP star;
* a paused trial checkpoints through ``preempt.should_preempt()`` and, activated again,
  restores ``det.get_cluster_info().latest_checkpoint`` and continues from its step.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from dethpc.backends.slurm import SlurmBackend
from dethpc.common.hostlist import expand_hostlist
from dethpc.common.paths import ExperimentPaths
from dethpc.common.runner import RecordingRunner
from dethpc.config import load_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control import experiments
from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.store.models import Checkpoint, ExperimentState, Metric
from dethpc.surfaces.views import describe_experiment, trial_detail
from tests.slurm.fixtures.harness import scancel_store_jobs

REPO = Path(__file__).resolve().parents[2]
CORE_API = REPO / "examples" / "core_api"
STAR = REPO / "tests" / "fixtures" / "core_star"


@pytest.fixture
def env(tmp_path: Path, slurm_cluster: Any) -> Any:
    # one slot per node: slots_per_trial 2 puts a rank on each of two nodes
    cluster = ClusterConfig(
        backend="slurm", runs_root=tmp_path / "runs",
        pools={"default": ResourcePool(name="default", partition="debug", signal="USR2",
                                       signal_grace_s=30, cpus_per_slot=2)},
        tick_min_s=0.2, tick_max_s=1.0)
    store = Store(f"sqlite:///{tmp_path}/dethpc.db")
    backend = SlurmBackend(RecordingRunner(timeout=30.0))
    yield cluster, store, backend
    scancel_store_jobs(store)


def _create(cluster: ClusterConfig, store: Store, backend: SlurmBackend, name: str,
            overrides: list[str] | None = None) -> int:
    cfg = load_experiment_config(CORE_API / name, overrides or [])
    return experiments.create_experiment(store, cluster, cfg, CORE_API, backend)


def _drive(daemon: Daemon, store: Store, exps: list[int], timeout: float,
           until: Any = None) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = daemon.tick()
        assert not stats.errors, stats.errors
        states = {e: experiments.get_experiment(store, e).state for e in exps}
        if until is not None and until():
            return states
        if all(ExperimentState(s).is_terminal for s in states.values()):
            return states
        time.sleep(0.3)
    raise AssertionError(f"experiments {exps} did not finish in {timeout}s: {states}")


def _trial_dir(store: Store, exp: int, trial_id: int) -> Path:
    run_dir = Path(experiments.get_experiment(store, exp).run_dir)
    return ExperimentPaths(run_dir).trial(trial_id).root


def _records(trial_dir: Path, kind: str) -> list[dict[str, Any]]:
    lines = (trial_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("kind") == kind]


def _log(trial_dir: Path) -> str:
    return "".join(p.read_text() for p in sorted(trial_dir.glob("slurm-*.out")))


def _stored(store: Store, trial_id: int) -> tuple[list[Metric], list[Checkpoint]]:
    with store.session() as s:
        metrics = list(s.exec(select(Metric).where(Metric.trial_id == trial_id)))
        ckpts = list(s.exec(select(Checkpoint).where(Checkpoint.trial_id == trial_id)))
    return metrics, ckpts


def test_core_api_tutorial_stages_complete(env: Any) -> None:
    cluster, store, backend = env
    names = ["const.yaml", "metrics.yaml", "search.yaml", "distributed.yaml", "trainer.yaml"]
    exps = {n: _create(cluster, store, backend, n) for n in names}
    # Core API collectives without torch: from_deepspeed() + the TCP star, 2 nodes
    star_cfg = load_experiment_config(CORE_API / "distributed.yaml", [
        "entrypoint=python3 -m determined.launch.deepspeed python3 star.py",
        "name=core-api-star"])
    exps["star"] = experiments.create_experiment(store, cluster, star_cfg, STAR, backend)
    names.append("star")
    states = _drive(Daemon(store, cluster, backend), store, list(exps.values()), timeout=240)
    details = {n: describe_experiment(store, e) for n, e in exps.items()}
    logs = {n: _log(_trial_dir(store, exps[n], details[n]["trials"][0]["id"])) for n in names}
    assert all(s == "COMPLETED" for s in states.values()), (states, logs)

    # start: nothing reported, the trial still completes
    (start,) = details["const.yaml"]["trials"]
    assert start["state"] == "COMPLETED" and "final loss" in logs["const.yaml"]

    # metrics: training every 10 steps, validation at 25 and 50, progress up to 1.0
    (m,) = details["metrics.yaml"]["trials"]
    metrics, _ = _stored(store, m["id"])
    assert sorted(r.steps for r in metrics if r.kind == "validation") == [25, 50]
    assert sorted(r.steps for r in metrics if r.kind == "training") == [10, 20, 30, 40, 50]
    progress = _records(_trial_dir(store, exps["metrics.yaml"], m["id"]), "progress")
    assert [p["progress"] for p in progress][-1] == 1.0 and len(progress) == 5
    assert m["best_validation"] is not None

    # search: three trials with their own hyperparameters, each scored
    search = details["search.yaml"]["trials"]
    assert len(search) == 3 and all(t["best_validation"] is not None for t in search)
    assert len({json.dumps(t["hparams"], sort_keys=True) for t in search}) == 3

    # distributed: two ranks on two nodes; allgather saw both; rank 0 checkpointed
    (d,) = details["distributed.yaml"]["trials"]
    ddir = _trial_dir(store, exps["distributed.yaml"], d["id"])
    vals = _records(ddir, "validation")
    assert [v["metrics"]["world_size"] for v in vals] == [2, 2, 2, 2], logs["distributed.yaml"]
    assert [v["metrics"]["nodes"] for v in vals] == [2, 2, 2, 2], logs["distributed.yaml"]
    assert "allgather at step 40" in logs["distributed.yaml"]
    assert "dethpc.launch.torch_distributed" in (ddir / "job.sbatch").read_text()
    job = trial_detail(store, d["id"])["jobs"][0]
    assert len(expand_hostlist(job["nodes"])) == 2, job
    _, ckpts = _stored(store, d["id"])
    assert sorted(c.steps_completed for c in ckpts)[-1] == 40

    # the TCP star across two nodes, ranks from Determined's from_deepspeed()
    (st,) = details["star"]["trials"]
    (v,) = _records(_trial_dir(store, exps["star"], st["id"]), "validation")
    assert v["metrics"] == {"world_size": 2, "nodes": 2, "ranks_sum": 3,
                            "broadcast_ok": True}, logs["star"]
    sdir = _trial_dir(store, exps["star"], st["id"])
    assert "dethpc.launch.deepspeed" in (sdir / "job.sbatch").read_text()
    assert "rank 1 of 2: allgather" in logs["star"], logs["star"]

    # the PyTorch Trainer: validations at 20 and 40, checkpoints at 20 and 40
    (t,) = details["trainer.yaml"]["trials"]
    metrics, ckpts = _stored(store, t["id"])
    assert sorted(r.steps for r in metrics if r.kind == "validation") == [20, 40]
    assert sorted(c.steps_completed for c in ckpts) == [20, 40]


def test_paused_trial_resumes_from_its_checkpoint(env: Any) -> None:
    cluster, store, backend = env
    exp = _create(cluster, store, backend, "checkpoints.yaml",
                  ["entrypoint=python3 model_def_checkpoints.py --steps 100 --step-time 0.1"])
    daemon = Daemon(store, cluster, backend)

    def trained(n: int) -> Any:
        def check() -> bool:
            trials = describe_experiment(store, exp)["trials"]
            return bool(trials) and trials[0]["steps_completed"] >= n
        return check

    _drive(daemon, store, [exp], timeout=120, until=trained(20))
    experiments.request_state(store, exp, "pause")

    def paused() -> bool:
        trials = describe_experiment(store, exp)["trials"]
        return trials[0]["state"] == "PAUSED"

    _drive(daemon, store, [exp], timeout=120, until=paused)
    (trial,) = describe_experiment(store, exp)["trials"]
    tdir = _trial_dir(store, exp, trial["id"])
    stopped_at = max(c.steps_completed for c in _stored(store, trial["id"])[1])
    assert 20 <= stopped_at < 100, _log(tdir)
    assert "preempted after step" in _log(tdir)

    experiments.request_state(store, exp, "activate")
    assert _drive(daemon, store, [exp], timeout=180)[exp] == "COMPLETED", _log(tdir)
    log = _log(tdir)
    assert f"at step {stopped_at}" in log and "resumed from checkpoint" in log, log
    steps = [r["steps"] for r in _records(tdir, "training")]
    # every 10 steps once: nothing trained twice, nothing skipped
    assert steps == list(range(10, 101, 10)), steps
