"""A nested launcher through the daemon on the real dev cluster: wrapper commands in
front of ``python -m dethpc.launch.torch_distributed`` still give one rank per slot."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from dethpc.common.paths import ExperimentPaths
from dethpc.config import load_experiment_config
from dethpc.control import experiments
from dethpc.control.daemon import Daemon
from dethpc.surfaces.views import describe_experiment

from .test_daemon_slurm import drive, env  # noqa: F401 - env is a fixture

REPO = Path(__file__).resolve().parents[2]
RANKS = REPO / "tests" / "fixtures" / "ranks"


def test_wrapped_launcher_runs_every_rank(env, tmp_path):  # noqa: F811
    cluster, store, runner, backend = env
    path = tmp_path / "nested.yaml"
    path.write_text(yaml.safe_dump({
        "name": "nested",
        # env and taskset stand for numactl (not installed here): any wrapper works
        "entrypoint": "env DETHPC_TEST_WRAPPED=yes taskset -c 0 "
                      "python3 -m dethpc.launch.torch_distributed -- train.py",
        "searcher": {"name": "single", "metric": "world", "smaller_is_better": False,
                     "max_length": {"batches": 1}},
        "resources": {"slots_per_trial": 2}, "max_restarts": 0}))
    cfg = load_experiment_config(path)
    exp = experiments.create_experiment(store, cluster, cfg, RANKS, backend)
    assert drive(Daemon(store, cluster, backend), store, exp, timeout=180) == "COMPLETED"
    (trial,) = describe_experiment(store, exp)["trials"]
    tdir = ExperimentPaths(Path(experiments.get_experiment(store, exp).run_dir)).trial(
        trial["id"]).root
    logs = "".join(p.read_text() for p in sorted(tdir.glob("slurm-*.out")))
    ranks = [json.loads((tdir / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["WORLD_SIZE"] for r in ranks] == ["2", "2"], logs
    assert [r["SLURM_PROCID"] for r in ranks] == ["0", "1"], logs  # srun by the launcher
    assert all(r["DETHPC_TEST_WRAPPED"] == "yes" for r in ranks), logs
    assert trial["best_validation"] == 2.0
    assert "srun --ntasks=1 --nodes=1" not in (tdir / "job.sbatch").read_text()
