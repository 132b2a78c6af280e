"""adaptive ASHA of the digits example on the real dev cluster, both variants, 32 trials:
runs to completion through job arrays; describe shows rungs, stopped/promoted trials
and the best trial."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from dethpc import experiments
from dethpc.backends.slurm import SlurmBackend
from dethpc.cli.views import describe_experiment
from dethpc.config import load_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.daemon import Daemon
from dethpc.runner import RecordingRunner
from dethpc.store import Store
from dethpc.store.models import ExperimentState

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"


@pytest.mark.parametrize("variant", ["stopping", "promotion"])
def test_asha_digits_32_trials(tmp_path, slurm_cluster, variant):
    cluster = ClusterConfig(
        backend="slurm", runs_root=tmp_path / "runs",
        pools={"default": ResourcePool(name="default", partition="debug", signal_grace_s=30)})
    store = Store(f"sqlite:///{tmp_path}/dethpc.db")
    runner = RecordingRunner(timeout=60)
    backend = SlurmBackend(runner)
    cfg = load_experiment_config(DIGITS / "adaptive.yaml", [
        "searcher.max_trials=32", "searcher.max_concurrent_trials=8",
        f"searcher.variant={variant}", "searcher.stop_grace_s=30", "searcher.max_time=200"])
    exp = experiments.create_experiment(store, cluster, cfg, DIGITS, backend)
    daemon = Daemon(store, cluster, backend)
    deadline = time.monotonic() + 900
    ticks = 0
    while time.monotonic() < deadline:
        stats = daemon.tick()
        ticks += 1
        assert not stats.errors, stats.errors
        if ExperimentState(experiments.get_experiment(store, exp).state).is_terminal:
            break
        time.sleep(0.5)
    d = describe_experiment(store, exp)
    print(variant, Counter(t["state"] for t in d["trials"]),
          Counter(t["searcher_status"] for t in d["trials"]),
          Counter(t["steps_completed"] for t in d["trials"]), "sbatch", runner.count("sbatch"))
    assert d["state"] == "COMPLETED", d["state"]
    assert len(d["trials"]) == 32
    states = Counter(t["state"] for t in d["trials"])
    statuses = Counter(t["searcher_status"] for t in d["trials"])
    assert d["rungs"], "describe shows the rungs"
    if variant == "stopping":
        assert states["STOPPED"] > 0, states          # losers were stopped early
        # a trial may reach its length before the daemon's next tick delivers the stop
        assert statuses["stopped"] >= states["STOPPED"], (statuses, states)
    else:
        assert statuses["promoted"] + statuses["completed"] > 0, statuses
        assert states["STOPPED"] == 0, states          # promotion never stops a trial
    full = [t for t in d["trials"] if t["steps_completed"] >= 200]
    assert 0 < len(full) < 32, "some trials reached the full length, not all"
    best = d["best_trial"]
    assert best is not None and best["best_validation"] is not None and best["best_checkpoint"]
    # arrays: far fewer sbatch calls than trials
    assert runner.count("sbatch") < 32
