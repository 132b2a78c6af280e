"""Determined 0.38 length semantics on the dev cluster: a random search without
``searcher.max_length`` runs each trial (an sbatch array task) until its training
code ends -- the toy trial's own 10 steps -- with no target.json written."""

from __future__ import annotations

from pathlib import Path

from dethpc.config import load_experiment_config
from dethpc.control import experiments
from dethpc.control.daemon import Daemon
from dethpc.surfaces.views import describe_experiment
from tests.slurm.test_daemon_slurm import TOY, drive, env, toy_config  # noqa: F401


def test_random_search_without_max_length_runs_until_the_code_ends(env, tmp_path):  # noqa: F811
    cluster, store, runner, backend = env
    cfg = load_experiment_config(toy_config(tmp_path / "c.yaml", searcher={
        "name": "random", "metric": "validation_loss", "max_trials": 3,
        "max_concurrent_trials": 3}))
    assert cfg.searcher.max_length is None and not cfg.unsupported
    exp = experiments.create_experiment(store, cluster, cfg, TOY, backend)
    assert drive(Daemon(store, cluster, backend), store, exp) == "COMPLETED"
    d = describe_experiment(store, exp)
    assert len(d["trials"]) == 3
    for t in d["trials"]:
        assert t["state"] == "COMPLETED", t
        assert t["steps_completed"] == 10          # the training code's own length
        assert t["best_validation"] is not None and t["best_checkpoint"]
    submits = [c for c in runner.calls if c[0] == "sbatch" and "--test-only" not in c]
    assert len(submits) == 1                        # one array for the three trials
    assert not list(Path(d["run_dir"], "trials").glob("*/target.json"))
