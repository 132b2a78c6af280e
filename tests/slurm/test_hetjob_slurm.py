"""A trial with ``slurm.components`` on the real dev cluster: one heterogeneous job
whose server component and two trainer tasks exchange data over TCP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from sqlmodel import select

from dethpc.common.paths import ExperimentPaths
from dethpc.config import load_experiment_config
from dethpc.control import experiments
from dethpc.control.daemon import Daemon
from dethpc.store.models import Job
from dethpc.surfaces.views import describe_experiment
from tests.backend_polling import submits

from .test_daemon_slurm import drive, env  # noqa: F401 - env is a fixture

REPO = Path(__file__).resolve().parents[2]
HET = REPO / "tests" / "fixtures" / "het"


@pytest.mark.spanning   # 25.11's srun needs the component's shape spelled out (jobscript)
def test_server_component_and_two_trainers_exchange_data(env, tmp_path):  # noqa: F811
    cluster, store, runner, backend = env
    path = tmp_path / "het.yaml"
    path.write_text(yaml.safe_dump({
        "name": "het", "entrypoint": "python3 -m dethpc.launch.torch_distributed -- train.py",
        "searcher": {"name": "single", "metric": "total", "smaller_is_better": False,
                     "max_length": {"batches": 1}},
        "resources": {"slots_per_trial": 2}, "max_restarts": 0,
        "environment": {"environment_variables": ["DETHPC_TEST_TRAINERS=2"]},
        "slurm": {"components": [{"name": "server", "entrypoint": "python3 server.py",
                                  "ready": "port", "ready_timeout": 120}]}}))
    cfg = load_experiment_config(path)
    exp = experiments.create_experiment(store, cluster, cfg, HET, backend)
    assert drive(Daemon(store, cluster, backend), store, exp, timeout=180) == "COMPLETED"

    d = describe_experiment(store, exp)
    (trial,) = d["trials"]
    tdir = ExperimentPaths(Path(experiments.get_experiment(store, exp).run_dir)).trial(
        trial["id"]).root
    logs = "".join(p.read_text() for p in sorted(tdir.glob("slurm-*.out")))
    assert trial["state"] == "COMPLETED", logs
    server = json.loads((tdir / "server.json").read_text())
    # both trainer ranks reached the server, and both got the server's answer back
    assert server["received"] == [{"rank": 0, "value": 10}, {"rank": 1, "value": 20}], logs
    assert server["total"] == 30
    assert trial["best_validation"] == 30.0, trial
    assert "[server rank=0] server: listening" in logs, logs
    assert "component server is up (port" in logs, logs
    for rank in (0, 1):
        assert f"[rank={rank}] trainer: rank {rank}" in logs and "got total 30" in logs, logs
    # one sbatch, one job: a heterogeneous job (the server is its own component job id)
    assert submits(runner) == 1
    with store.session() as s:
        (job,) = s.exec(select(Job).where(Job.experiment_id == exp)).all()
    assert job.ref is not None and job.ref.isdigit()
    info = runner.run(["scontrol", "-o", "show", "job", job.ref]).stdout
    offsets = [w for w in info.split() if w.startswith("HetJobOffset=")]
    assert offsets == ["HetJobOffset=0", "HetJobOffset=1"], info


def test_component_that_cannot_fit_is_refused_at_submit(env, tmp_path):  # noqa: F811
    import dataclasses

    from dethpc.common.errors import SubmitError
    from dethpc.config.model import ResourcePool

    cluster, store, runner, backend = env
    cluster = dataclasses.replace(cluster, pools={
        **cluster.pools, "nowhere": ResourcePool(name="nowhere", partition="nosuch")})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({
        "name": "het-bad", "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "total", "max_length": {"batches": 1}},
        "slurm": {"components": [
            {"name": "big", "entrypoint": "x", "nodes": 9},
            {"name": "lost", "entrypoint": "x", "resource_pool": "nowhere"}]}}))
    cfg = load_experiment_config(path)
    with pytest.raises(SubmitError, match=r"slurm.components\[0\] \(big\): partition 'debug' "
                                          r"cannot fit 9 node"):
        experiments.create_experiment(store, cluster, cfg, HET, backend)
    cfg2 = load_experiment_config(path, ["slurm.components=[{name: lost, entrypoint: x, "
                                         "resource_pool: nowhere}]"])
    with pytest.raises(SubmitError, match=r"slurm.components\[0\] \(lost\): partition "
                                          r"'nosuch' does not exist"):
        experiments.create_experiment(store, cluster, cfg2, HET, backend)
    assert submits(runner) == 0  # asked Slurm (--test-only), submitted nothing
