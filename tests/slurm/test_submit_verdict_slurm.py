"""Slurm's verdict at submit, on the real dev cluster.

``dethpc submit`` asks ``sbatch --test-only`` about the first trial's job and refuses
with Slurm's own words, the pool and the config fields behind them, exit 1, no
traceback and nothing recorded. One case per refusal Slurm gives at submit: unknown
partition, QoS or account; no association (as the non-root test user); a QoS the
account does not allow; more CPUs, memory or GPUs (count or type) than any node has;
time over the partition's MaxTime. And the other way round: every pool of
``examples/cluster/slurm-devcluster.yaml`` (the shipped site example mapped onto the
dev cluster) renders trial and array scripts that ``sbatch --test-only`` accepts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from dethpc.backends.base import JobRequest
from dethpc.backends.slurm import SlurmBackend
from dethpc.common.runner import CommandRunner
from dethpc.config import load_cluster_config, load_experiment_config
from dethpc.control.experiments import check_with_scheduler
from dethpc.devcluster.users import ClusterUser
from dethpc.jobs.jobscript import array_script, trial_script
from tests.slurm.conftest import SlurmCluster

#: release-agnostic, and run in the 25.11 lane only: that lane has room, Debian's three
#: have none (docs/testing.md, "Which release runs what")
pytestmark = [pytest.mark.parametrize("slurm_release", ["25.11"], indirect=True,
                                      ids=["slurm-25.11"])]

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "examples" / "cluster" / "slurm-devcluster.yaml"
DIGITS = ROOT / "examples" / "digits"


def site_example(slurm_cluster: SlurmCluster) -> dict:
    """The shipped dev-cluster example, its node names (``--exclude=n4``) mapped onto this
    lane's cluster (the same names in lane 1)."""
    return yaml.safe_load(slurm_cluster.lane_nodes_in(SITE.read_text()))


def site_with(tmp: Path, pool: str, **changes: object) -> Path:
    """The dev-cluster site config with ``changes`` to one pool, written under ``tmp``."""
    raw = site_example(SlurmCluster())
    raw["runs_root"] = str(tmp / "runs")
    raw["pools"][pool].update(changes)
    path = tmp / "cluster.yaml"
    path.write_text(yaml.safe_dump(raw))
    path.chmod(0o644)
    return path


def submit(cluster: Path, home: Path, *overrides: str, user: ClusterUser | None = None,
           python: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    args = ["--cluster-config", str(cluster), "submit", str(DIGITS / "const.yaml"),
            str(DIGITS), *overrides]
    env = {**os.environ, "DETHPC_HOME": str(home), "COLUMNS": "200"}
    if user is None:
        argv = [sys.executable, "-m", "dethpc.surfaces.cli.main", *args]
    else:
        argv = user.as_user(["env", f"DETHPC_HOME={home}", "COLUMNS=200", *(python or []),
                             "-m", "dethpc.surfaces.cli.main", *args])
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


REFUSALS = {
    # pool, changes to it, experiment overrides, Slurm's words, the field named
    "unknown partition": ("debug", {"partition": "nope"}, (),
                          "Invalid partition name specified", "pools.debug.partition = 'nope'"),
    "unknown QoS": ("debug", {"qos": "nope"}, (), "Invalid qos specification",
                    "pools.debug.qos = 'nope'"),
    "unknown account": ("debug", {"account": "nope"}, (),
                        "Invalid account or account/partition combination specified",
                        "pools.debug.account = 'nope'"),
    "QoS the account does not allow": ("high", {"qos": "normal"}, (),
                                       "Invalid qos specification",
                                       "pools.high.account = 'ml-team'"),
    "more CPUs than a node": ("debug", {"cpus_per_slot": 32}, (),
                              "Requested node configuration is not available",
                              "pools.debug.cpus_per_slot = 32"),
    "more memory than a node": ("debug", {"mem_per_slot": "20G"}, (),
                                "Requested node configuration is not available",
                                "pools.debug.mem_per_slot = '20G'"),
    "more GPUs per node than a node": ("low", {"slots_per_node": 3},
                                       ("--config", "resources.slots_per_trial=3"),
                                       "Requested node configuration is not available",
                                       "pools.low.slots_per_node = 3"),
    "a GPU type no node has": ("low", {"gpu_type": "h100"}, (),
                               "Requested node configuration is not available",
                               "pools.low.gpu_type = 'h100'"),
    "time over MaxTime": ("debug", {"default_time": "2-00:00:00"}, (),
                          "Requested time limit is invalid",
                          "pools.debug.default_time = '2-00:00:00'"),
}


@pytest.mark.parametrize(("pool", "changes", "overrides", "words", "field"),
                         REFUSALS.values(), ids=REFUSALS.keys())
def test_submit_refuses_with_slurms_words_and_the_field(
        slurm_cluster, tmp_path, pool, changes, overrides, words, field) -> None:
    cluster = site_with(tmp_path, pool, **changes)
    res = submit(cluster, tmp_path / "home", "--config",
                 f"resources.resource_pool={pool}", *overrides)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "Traceback" not in out
    assert "Slurm refuses the trials' job (sbatch --test-only)" in out
    assert words in out and field in out, out
    assert f"resource pool {pool!r}" in out
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_no_association_is_refused_for_the_user(slurm_cluster, cluster_user, user_tmp,
                                                user_python):
    # dethpc-user has associations with account ml-team only; root has both accounts
    cluster = site_with(user_tmp, "debug", account="dethpc")
    res = submit(cluster, user_tmp / "home", "--config", "resources.resource_pool=debug",
                 user=cluster_user, python=user_python)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "Invalid account or account/partition combination specified" in out, out
    assert "pools.debug.account = 'dethpc'" in out and "Traceback" not in out
    # --no-daemon: the verdict is sbatch's --test-only at submit; a daemon started as the
    # user would outlive the test (its home is removed under it)
    ok = submit(site_with(user_tmp, "debug", account="ml-team", qos="limited"),
                user_tmp / "home", "--config", "resources.resource_pool=debug",
                "--no-daemon", user=cluster_user, python=user_python)
    assert ok.returncode == 0, ok.stdout + ok.stderr   # the same user, an account it has


def cases():
    for pool in sorted(load_cluster_config(SITE).pools):
        for exp in sorted(DIGITS.glob("*.yaml")):
            yield pytest.param(pool, exp, id=f"{pool}-{exp.stem}")


@pytest.mark.parametrize(("pool", "exp_path"), list(cases()))
def test_every_pool_of_the_site_example_is_accepted(slurm_cluster, tmp_path, pool, exp_path):
    example = tmp_path / "slurm-devcluster.yaml"
    example.write_text(yaml.safe_dump(site_example(slurm_cluster)))
    cluster = replace(load_cluster_config(example), runs_root=tmp_path / "runs")
    cfg = load_experiment_config(exp_path)
    cfg = replace(cfg, resources=replace(cfg.resources, resource_pool=pool))
    backend = SlurmBackend(CommandRunner(timeout=60))
    check_with_scheduler(cfg, cluster, backend)  # the trial's job, as `dethpc submit` does
    run_dir = tmp_path / "run"
    trial = run_dir / "trials" / "1" / "job.sbatch"
    trial.parent.mkdir(parents=True)
    trial.write_text(trial_script(cfg, cluster, backend="slurm", python=sys.executable,
                                  run_dir=run_dir, exp_id=1, trial_id=1))
    array = run_dir / "array.sbatch"
    array.write_text(array_script(cfg, cluster, run_dir=run_dir, exp_id=1, batch_id=1,
                                  tasks=[(0, trial), (1, trial)]))
    words = backend.judge(JobRequest(name="dethpc-t", comment="dethpc:test", script=array,
                                     workdir=run_dir, array_indices=(0, 1), throttle=1))
    assert words is None, words
