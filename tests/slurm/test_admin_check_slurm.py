"""``dethpc admin check`` against the live dev cluster.

A cluster config that matches the dev cluster is clean (exit 0); then the live
cluster is changed (``scontrol update``) and restored in a ``finally``, and the
finding for the changed object must appear: a partition set DOWN, a MaxTime
below the pool's ``default_time``. Config-side mismatches (a QoS that does not
exist, a GPU type or count the nodes lack) and the limited QoS's per-user
limits are read from the live cluster too. ``--probe`` runs real jobs: it
passes here, and fails with a clear finding when ``runs_root`` is not on a
filesystem the compute nodes share (the check runs in a private mount
namespace whose ``runs_root`` is a tmpfs only it sees) or ``python`` is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from dethpc.common.runner import CommandRunner, RecordingRunner
from dethpc.config.cluster import load_cluster_config
from dethpc.devcluster.site import SiteSpec
from dethpc.devcluster.users import ClusterUser
from dethpc.surfaces.admin import Severity, check_cluster, gather_facts

SITE = SiteSpec()
GPU_TYPE = SITE.gres.type
GPUS = SITE.gres.count


def _dethpc() -> list[str]:
    script = Path(sys.executable).parent / "dethpc"
    return [str(script)] if script.exists() else [sys.executable, "-m", "dethpc.surfaces.cli.main"]


def write_config(tmp_path: Path, **pool_changes: dict[str, Any]) -> Path:
    """A cluster config whose pools match the dev cluster; ``pool_changes`` edit pools."""
    pools: dict[str, dict[str, Any]] = {
        "cpu": {"partition": "debug", "account": SITE.default_account, "qos": "normal",
                "slots_per_node": 4, "cpus_per_slot": 2, "mem_per_slot": "1G",
                "default_time": SITE.default_time},
        "gpu": {"partition": "debug", "account": SITE.default_account, "gres": "gpu",
                "gpu_type": GPU_TYPE, "slots_per_node": GPUS, "cpus_per_slot": 4,
                "mem_per_slot": "2G"},
        "low": {"partition": "low", "account": SITE.default_account, "preemptible": True,
                "signal_grace_s": 10, "default_time": SITE.default_time},
    }
    for name, changes in pool_changes.items():
        pools[name] = {**pools.get(name, {}), **changes}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({
        "backend": "slurm", "runs_root": str(tmp_path / "runs"), "default_pool": "cpu",
        "python": sys.executable, "pools": pools}), encoding="utf-8")
    return path


def run_cli(config: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*_dethpc(), "--cluster-config", str(config), "admin", "check",
                           *args], capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


def findings(config: Path, pools: list[str] | None = None) -> list[tuple[str, str, str, str]]:
    """(severity, pool, check, message) of every finding, checked in-process."""
    cfg = load_cluster_config(config)
    found = check_cluster(cfg, gather_facts(CommandRunner(timeout=30), "root"), pools)
    return [(f.severity.value, f.pool, f.check, f.message) for f in found]


def errors(found: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str, str]]:
    return [f for f in found if f[0] == Severity.ERROR]


@contextmanager
def partition_changed(slurm_cluster: Any, name: str, **changes: str) -> Iterator[None]:
    """The live partition ``name`` with ``changes`` (scontrol update), restored after."""
    before = slurm_cluster.partitions()[name]
    update = ["scontrol", "update", f"PartitionName={name}"]
    slurm_cluster.run([*update, *(f"{k}={v}" for k, v in changes.items())])
    try:
        yield
    finally:
        slurm_cluster.run([*update, *(f"{k}={before[k]}" for k in changes)])
        assert {k: slurm_cluster.partitions()[name][k] for k in changes} == \
            {k: before[k] for k in changes}


@pytest.mark.spanning
def test_matching_config_is_clean(slurm_cluster: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    proc = run_cli(config, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    bad = [f for f in report["findings"] if f["severity"] != "ok"]
    assert bad == []
    assert report["cluster"] == slurm_cluster.layout.cluster_name   # devcluster in lane 1
    assert report["exit_code"] == 0
    checks = {(f["pool"], f["check"]) for f in report["findings"]}
    assert {("gpu", "gres"), ("gpu", "fit"), ("low", "preempt.mode"), ("low", "preempt.grace"),
            ("low", "preempt.signal"), ("cpu", "time"), ("cpu", "association")} <= checks
    # a fixed number of commands, whatever the number of pools
    runner = RecordingRunner(timeout=30)
    gather_facts(runner, "root")
    assert runner.count() == 7
    assert runner.count("scontrol") == 3 and runner.count("sacctmgr") == 4


def test_partition_down_is_an_error_for_its_pool(slurm_cluster: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    with partition_changed(slurm_cluster, "low", State="DOWN"):
        proc = run_cli(config)
        found = findings(config)
    assert proc.returncode == 1, proc.stdout
    assert "ERROR   pool low partition: partition low is DOWN" in proc.stdout
    assert "fix: scontrol update PartitionName=low State=UP" in proc.stdout
    assert [f[1:3] for f in errors(found)] == [("low", "partition")]
    assert run_cli(config, "--pool", "cpu").returncode == 0  # the other pools are fine


def test_max_time_below_default_time_is_an_error(slurm_cluster: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    with partition_changed(slurm_cluster, "low", MaxTime="00:10:00"):
        found = findings(config)
    assert [f[1:] for f in errors(found)] == [
        ("low", "time", f"default_time {SITE.default_time} is over partition low's MaxTime "
         "00:10:00: sbatch refuses such jobs (EnforcePartLimits) or they pend forever "
         "(PartitionTimeLimit)")]


def test_unknown_qos_is_an_error(slurm_cluster: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path, cpu={"qos": "no-such-qos"})
    proc = run_cli(config, "--json", "--pool", "cpu")
    assert proc.returncode == 1
    bad = [f for f in json.loads(proc.stdout)["findings"] if f["severity"] == "error"]
    assert [(f["pool"], f["check"], f["message"]) for f in bad] == \
        [("cpu", "qos", "QoS 'no-such-qos' does not exist")]
    assert "limited" in bad[0]["fix"] and "normal" in bad[0]["fix"]


@pytest.mark.parametrize(("changes", "message"), [
    ({"gpu_type": "h100"}, f"no node of partition debug has GPUs of type h100 "
                           f"(types there: {GPU_TYPE})"),
    ({"slots_per_node": 2 * GPUS, "cpus_per_slot": 1, "mem_per_slot": "1G"},
     f"slots_per_node={2 * GPUS} asks {2 * GPUS} gpu:{GPU_TYPE} per node, but nodes of "
     f"debug have at most {GPUS}"),
])
def test_gpu_type_or_count_the_nodes_lack_is_an_error(slurm_cluster: Any, tmp_path: Path,
                                                       changes: dict[str, Any],
                                                       message: str) -> None:
    found = findings(write_config(tmp_path, gpu=changes), ["gpu"])
    assert [f[1:] for f in errors(found)] == [("gpu", "gres", message)]


def test_limited_qos_limits_are_reported(slurm_cluster: Any, cluster_user: ClusterUser,
                                         tmp_path: Path) -> None:
    limited = SITE.limited_qos
    config = write_config(tmp_path, team={"partition": "debug",
                                          "account": cluster_user.account})
    proc = run_cli(config, "--json", "--pool", "team", "--user", cluster_user.name)
    assert proc.returncode == 0  # limits are a warning: dethpc queues within them
    report = json.loads(proc.stdout)
    limits = [f for f in report["findings"] if f["check"] == "limits"]
    assert [(f["severity"], f["pool"]) for f in limits] == [("warning", "team")]
    assert (f"at most {limited.max_submit_jobs_per_user} job(s) pending+running "
            f"(MaxSubmitJobsPerUser of QoS {limited.name}); at most "
            f"{limited.max_jobs_per_user} job(s) running (MaxJobsPerUser of QoS "
            f"{limited.name})") in limits[0]["message"]
    assert report["user"] == cluster_user.name


@pytest.mark.spanning
def test_probe_passes_on_the_dev_cluster(slurm_cluster: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    proc = run_cli(config, "--probe", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    probes = [f for f in json.loads(proc.stdout)["findings"] if f["check"].startswith("probe")]
    assert sorted((f["pool"], f["check"], f["severity"]) for f in probes) == sorted(
        (pool, check, "ok") for pool in ("cpu", "gpu", "low")
        for check in ("probe.runs_root", "probe.python"))
    assert all(sys.executable in f["message"] for f in probes if f["check"] == "probe.python")
    assert not (tmp_path / "runs" / ".dethpc-admin-probe").exists()  # cleaned up


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="needs unshare and root for a private mount namespace")
def test_probe_fails_when_runs_root_is_not_shared(slurm_cluster: Any, tmp_path: Path) -> None:
    # The check runs in its own mount namespace, where runs_root lies on a tmpfs: the
    # login side sees its own empty directory, the compute node (slurmd, outside the
    # namespace) writes to the host's: the same as runs_root on node-local disk.
    private = tmp_path / "private"
    (private / "runs").mkdir(parents=True)
    config = write_config(private)
    argv = [*_dethpc(), "--cluster-config", str(config), "admin", "check", "--probe",
            "--pool", "cpu"]
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           'mount -t tmpfs tmpfs "$1/runs" && shift && exec "$@"', "sh",
                           str(private), *argv], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "ERROR   pool cpu probe.runs_root:" in proc.stdout
    assert "this node does not see it: runs_root is not on a filesystem shared by this node " \
           "and the compute nodes" in proc.stdout


def test_probe_fails_when_python_is_missing(slurm_cluster: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["python"] = "/nonexistent/bin/python3"
    config.write_text(yaml.safe_dump(data))
    proc = run_cli(config, "--probe", "--pool", "cpu")
    assert proc.returncode == 1, proc.stdout
    assert "ERROR   pool cpu probe.python: probe job" in proc.stdout
    assert "/nonexistent/bin/python3 cannot run dethpc on" in proc.stdout


STANDIN_APPTAINER = ("#!/bin/sh\n"
                     "[ \"$1\" = --version ] && echo 'apptainer version 1.3.4 (stand-in)'\n")


@pytest.mark.parametrize("runtime", ["charliecloud", "apptainer-standin", "apptainer-missing"])
def test_probe_proves_the_container_runtime_and_image_cache(
        slurm_cluster: Any, tmp_path: Path, runtime: str) -> None:
    """Issue 14 item 3: the probe job runs the site's container runtime on the compute
    node (``--version``; Charliecloud's real ch-run, or a stand-in apptainer, since
    Apptainer cannot be installed here) and reads a token written into the SIF cache on
    this node; a runtime missing on the nodes is an error with its fix."""
    config = write_config(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["containers"] = {"runtime": "charliecloud" if runtime == "charliecloud"
                          else "apptainer", "sif_cache": str(tmp_path / "sif")}
    config.write_text(yaml.safe_dump(data))
    env = dict(os.environ)
    if runtime == "apptainer-standin":
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "apptainer").write_text(STANDIN_APPTAINER)
        (bin_dir / "apptainer").chmod(0o755)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
    proc = subprocess.run([*_dethpc(), "--cluster-config", str(config), "admin", "check",
                           "--probe", "--pool", "cpu", "--json"], capture_output=True,
                          text=True, timeout=300, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    found = {f["check"]: f for f in json.loads(proc.stdout)["findings"]
             if f["check"].startswith("probe.")}
    print(runtime, {k: (v["severity"], v["message"]) for k, v in found.items()})
    if runtime == "apptainer-missing":
        assert found["probe.container"]["severity"] == "error", found
        assert "does not run on" in found["probe.container"]["message"]
        assert found["probe.container"]["fix"]
        return
    assert found["probe.container"]["severity"] == "ok", found
    if runtime == "charliecloud":
        assert found["probe.container"]["message"].startswith("0.31"), found
        assert "probe.image_cache" not in found                       # nothing is pulled
    else:
        assert "stand-in" in found["probe.container"]["message"]
        assert found["probe.image_cache"]["severity"] == "ok", found
        assert not list((tmp_path / "sif").glob(".dethpc-probe-*"))     # cleaned up
