"""The daemon against the real dev cluster: experiments run to completion through
sbatch arrays, kill leaves nothing in squeue, a job scancel'ed behind dethpc's back
is handled per max_restarts, and a tick's Slurm commands do not grow with trials."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from dethpc.backends.slurm import SlurmBackend
from dethpc.common.runner import CommandRunner, RecordingRunner
from dethpc.config import load_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control import experiments
from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.store.models import ExperimentState
from dethpc.surfaces.views import describe_experiment
from tests.backend_polling import submits
from tests.slurm.fixtures.harness import scancel_store_jobs

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "tests" / "fixtures" / "toy"
DIGITS = REPO / "examples" / "digits"


@pytest.fixture
def env(tmp_path, slurm_cluster):
    cluster = ClusterConfig(
        backend="slurm", runs_root=tmp_path / "runs",
        pools={"default": ResourcePool(name="default", partition="debug",
                                       signal="USR2", signal_grace_s=30, cpus_per_slot=8)},
        tick_min_s=0.2, tick_max_s=1.0)
    store = Store(f"sqlite:///{tmp_path}/dethpc.db")
    runner = RecordingRunner(timeout=30.0)
    backend = SlurmBackend(runner)
    yield cluster, store, runner, backend
    scancel_store_jobs(store)


def toy_config(path: Path, **over) -> Path:
    raw = {"name": "toy-slurm", "entrypoint": "python3 train.py",
           "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6},
                               "step_time": 0.05},
           "searcher": {"name": "random", "metric": "validation_loss", "max_trials": 6,
                        "max_concurrent_trials": 6, "max_length": {"batches": 10}},
           "max_restarts": 1, "reproducibility": {"experiment_seed": 3}}
    raw.update(over)
    path.write_text(yaml.safe_dump(raw))
    return path


def drive(daemon: Daemon, store: Store, exp_id: int, timeout: float = 240,
          until=None) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = daemon.tick()
        assert not stats.errors, stats.errors
        exp = experiments.get_experiment(store, exp_id)
        if until is not None and until(describe_experiment(store, exp_id)):
            return exp.state
        if ExperimentState(exp.state).is_terminal:
            return exp.state
        time.sleep(0.3)
    raise AssertionError(f"experiment {exp_id} did not finish in {timeout}s")


def in_queue(store: Store, exp_id: int) -> list[str]:
    """This experiment's jobs that squeue still lists."""
    from sqlmodel import select

    from dethpc.store.models import Batch

    with store.session() as s:
        ids = {b.array_job_id for b in s.exec(select(Batch).where(Batch.experiment_id == exp_id))}
    out = CommandRunner().run(["squeue", "-h", "-r", "-o", "%i|%F"]).stdout
    return [line for line in out.splitlines() if line.split("|")[1] in ids]


def test_toy_experiment_runs_to_completion_across_nodes(env, tmp_path):
    cluster, store, runner, backend = env
    cfg = load_experiment_config(toy_config(tmp_path / "c.yaml"))
    exp = experiments.create_experiment(store, cluster, cfg, TOY, backend)
    daemon = Daemon(store, cluster, backend)
    assert drive(daemon, store, exp) == "COMPLETED"
    d = describe_experiment(store, exp)
    assert len(d["trials"]) == 6
    assert all(t["state"] == "COMPLETED" and t["best_checkpoint"] for t in d["trials"])
    assert submits(runner) == 1  # one array for the six trials
    from dethpc.surfaces.views import trial_detail

    nodes = {trial_detail(store, t["id"])["jobs"][0]["nodes"] for t in d["trials"]}
    assert len(nodes - {""}) >= 2, nodes


@pytest.mark.skipif(not (DIGITS / "random.yaml").exists(), reason="digits configs missing")
def test_digits_random_search_on_the_cluster(env, tmp_path):
    cluster, store, _runner, backend = env
    cfg = load_experiment_config(DIGITS / "random.yaml",
                                 ["searcher.max_trials=4", "searcher.max_concurrent_trials=4"])
    exp = experiments.create_experiment(store, cluster, cfg, DIGITS, backend)
    assert drive(Daemon(store, cluster, backend), store, exp, timeout=400) == "COMPLETED"
    d = describe_experiment(store, exp)
    assert len(d["trials"]) == 4
    assert all(t["state"] == "COMPLETED" and t["best_validation"] is not None
               for t in d["trials"])
    assert d["best_trial"]["best_checkpoint"]


def test_kill_cancels_every_job(env, tmp_path):
    cluster, store, _runner, backend = env
    cfg = load_experiment_config(toy_config(
        tmp_path / "c.yaml", hyperparameters={"x": 1.0, "step_time": 1.0},
        searcher={"name": "random", "metric": "validation_loss", "max_trials": 8,
                  "max_concurrent_trials": 8, "max_length": {"batches": 500}}))
    exp = experiments.create_experiment(store, cluster, cfg, TOY, backend)
    daemon = Daemon(store, cluster, backend)
    drive(daemon, store, exp, until=lambda d: sum(t["state"] == "RUNNING"
                                                   for t in d["trials"]) >= 4)
    end_and_check_queue_empty(daemon, store, exp, "kill")


def end_and_check_queue_empty(daemon: Daemon, store: Store, exp: int, action: str) -> None:
    """``kill``/``cancel`` the experiment: it ends CANCELED with every trial, and none of
    its array tasks (running or still pending) is left in squeue."""
    experiments.request_state(store, exp, action)
    assert drive(daemon, store, exp, timeout=120) == "CANCELED"
    deadline = time.monotonic() + 60
    while in_queue(store, exp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert in_queue(store, exp) == []
    trials = describe_experiment(store, exp)["trials"]
    assert all(t["state"] == "CANCELED" for t in trials), trials


@pytest.mark.parametrize("max_restarts,final", [(1, "COMPLETED"), (0, "ERROR")])
def test_outside_scancel_is_handled_per_max_restarts(env, tmp_path, max_restarts, final):
    cluster, store, _runner, backend = env
    cfg = load_experiment_config(toy_config(
        tmp_path / "c.yaml", hyperparameters={"x": 2.0, "step_time": 0.3},
        searcher={"name": "single", "metric": "validation_loss",
                  "max_length": {"batches": 30}},
        max_restarts=max_restarts))
    exp = experiments.create_experiment(store, cluster, cfg, TOY, backend)
    daemon = Daemon(store, cluster, backend)
    drive(daemon, store, exp, until=lambda d: d["trials"] and
          d["trials"][0]["steps_completed"] >= 3)
    from dethpc.surfaces.views import trial_detail

    trial = describe_experiment(store, exp)["trials"][0]
    ref = trial_detail(store, trial["id"])["jobs"][0]["ref"]
    CommandRunner().run(["scancel", ref])
    assert drive(daemon, store, exp, timeout=240) == final
    t = describe_experiment(store, exp)["trials"][0]
    assert t["restarts"] == 1
    if final == "COMPLETED":
        assert t["steps_completed"] == 30
    else:
        assert "max_restarts=0" in t["exit_reason"]


@pytest.mark.parametrize("n_trials", [5, 500])
def test_commands_per_tick_do_not_grow_with_trials(env, tmp_path, n_trials):
    cluster, store, runner, backend = env
    cfg = load_experiment_config(toy_config(
        tmp_path / "c.yaml", hyperparameters={"x": 1.0, "step_time": 2.0},
        searcher={"name": "random", "metric": "validation_loss", "max_trials": n_trials,
                  "max_concurrent_trials": n_trials, "max_length": {"batches": 1000}}))
    exp = experiments.create_experiment(store, cluster, cfg, TOY, backend)
    daemon = Daemon(store, cluster, backend)
    per_tick = []
    try:
        for _ in range(4):
            before = len(runner.calls)
            daemon.tick()
            per_tick.append([c[0] for c in runner.calls[before:]])
            time.sleep(0.5)
    finally:
        experiments.request_state(store, exp, "kill")
        drive(daemon, store, exp, timeout=180)
    sbatches = sum(c.count("sbatch") for c in per_tick)
    assert sbatches == 1, per_tick
    steady = per_tick[1:]
    assert all(len(cmds) <= 3 for cmds in steady), per_tick
    (Path(tmp_path) / "per_tick.json").write_text(json.dumps(per_tick))
