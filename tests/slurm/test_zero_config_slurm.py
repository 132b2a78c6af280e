"""Issue 32 item 1: a new user on a Slurm login node with nothing configured. As the dev
cluster's non-root ``dethpc-user`` with an empty home and a bare environment (no
``DETHPC_*``, no cluster config anywhere):

- ``dethpc config show-cluster`` prints the config Slurm's answers imply (the Slurm
  backend, the default partition, the user's own default account and QoS), says once
  where it came from, and what it prints, saved as a file, loads back to the same config;
- ``dethpc sbatch job.sh`` on an unchanged two-node script: sbatch's own output, the job
  COMPLETED in Slurm, and the daemon that ``dethpc sbatch`` started records it COMPLETED;
- ``dethpc submit`` of an experiment runs its trial on the cluster to COMPLETED;
- ``dethpc shell start -- COMMAND`` runs in an allocation of the default partition and
  passes the command's exit code through.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dethpc.devcluster.users import ClusterUser
from tests.local.conftest import TOY, write_config

JOB = """#!/bin/bash
#SBATCH --job-name=zero-config
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:05:00
srun hostname
"""


@pytest.fixture
def user_env(cluster_user: ClusterUser, user_python: list[str], user_tmp: Path,
             slurm_cluster: Any) -> Iterator[dict[str, Any]]:
    """The bare environment of a login shell: HOME, USER, PATH, the lane's SLURM_CONF."""
    import os

    home = user_tmp / "home"
    home.mkdir()
    shutil.chown(home, cluster_user.uid, cluster_user.gid)
    env = {"HOME": str(home), "USER": cluster_user.name, "LOGNAME": cluster_user.name,
           "PATH": "/usr/local/bin:/usr/bin:/bin",
           "SLURM_CONF": os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")}
    ctx = {"user": cluster_user, "python": user_python, "home": home, "env": env,
           "work": user_tmp}
    yield ctx
    dethpc(ctx, "daemon", "stop")


def dethpc(ctx: dict[str, Any], *args: str, stdin: str | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``dethpc ARGS`` as the user, in the bare environment (``env -i``), from its work
    directory. The python prefix's PYTHONPATH makes this checkout importable."""
    python = ctx["python"]
    pythonpath = [p for p in python if p.startswith("PYTHONPATH=")]
    interpreter = [p for p in python if p != "env" and not p.startswith("PYTHONPATH=")]
    extra = [f"{k}={v}" for k, v in {**ctx["env"], **(env or {})}.items()]
    argv = ctx["user"].as_user(["env", "-i", *extra, *pythonpath, *interpreter, "-m",
                                "dethpc.surfaces.cli.main", *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=180,
                          cwd=ctx["work"], input=stdin)


def wait_state(ctx: dict[str, Any], exp: int, want: str, timeout: float = 240.0) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        out = dethpc(ctx, "experiment", "describe", str(exp), "--json")
        if out.returncode == 0:
            state = json.loads(out.stdout)["state"]
            if state == want:
                return state
        time.sleep(1.0)
    return state


def test_a_new_user_needs_no_config(user_env: dict[str, Any], slurm_cluster: Any) -> None:
    ctx = user_env
    # what Slurm says: the default partition, the user's defaults (ml-team, limited)
    shown = dethpc(ctx, "config", "show-cluster")
    assert shown.returncode == 0, shown.stderr
    assert "no cluster config; Slurm cluster" in shown.stderr, shown.stderr
    derived = yaml.safe_load(shown.stdout)
    assert shown.stdout.startswith("# source: <detected from Slurm>")
    pool = derived["pools"][derived["default_pool"]]
    partitions = slurm_cluster.partitions()
    default = next(n for n, p in partitions.items() if p.get("Default") == "YES")
    assert (derived["backend"], pool["partition"], pool["account"], pool["qos"]) == \
        ("slurm", default, "ml-team", "limited"), derived
    assert derived["runs_root"] == str(ctx["home"] / ".dethpc" / "runs")
    # said once: the next command reads the cache quietly
    again = dethpc(ctx, "config", "show-cluster")
    assert again.stdout == shown.stdout and "no cluster config" not in again.stderr
    # an admin saves it and it loads back as it was
    saved = ctx["work"] / "cluster.yaml"
    saved.write_text(shown.stdout)
    reread = dethpc(ctx, "config", "show-cluster", env={"DETHPC_CLUSTER_CONFIG": str(saved)})
    assert reread.returncode == 0, reread.stderr
    assert yaml.safe_load(reread.stdout) == derived

    # an unchanged script through dethpc sbatch: sbatch's words, tracked to COMPLETED
    job = ctx["work"] / "job.sh"
    job.write_text(JOB)
    shutil.chown(job, ctx["user"].uid, ctx["user"].gid)
    out = dethpc(ctx, "sbatch", "job.sh")
    assert out.returncode == 0, out.stderr
    assert re.fullmatch(r"Submitted batch job \d+\n", out.stdout), out.stdout
    assert "started the daemon" in out.stderr, out.stderr
    listed = json.loads(dethpc(ctx, "experiment", "list", "--json").stdout)
    (exp,) = [e["id"] for e in listed if e["name"] == "zero-config"]
    assert wait_state(ctx, exp, "COMPLETED") == "COMPLETED"

    # an experiment through dethpc submit, on the cluster
    toy = ctx["work"] / "toy"
    shutil.copytree(TOY, toy)
    config = write_config(ctx["work"] / "exp.yaml", searcher={
        "name": "single", "metric": "validation_loss", "max_length": {"batches": 5}})
    for p in (config, *toy.rglob("*"), toy):
        shutil.chown(p, ctx["user"].uid, ctx["user"].gid)
    created = dethpc(ctx, "submit", str(config), str(toy), "--json")
    assert created.returncode == 0, created.stderr
    exp2 = json.loads(created.stdout)["id"]
    assert wait_state(ctx, exp2, "COMPLETED") == "COMPLETED"
    trial = json.loads(dethpc(ctx, "experiment", "describe", str(exp2), "--json").stdout)
    (t,) = trial["trials"]
    assert t["state"] == "COMPLETED" and t["steps_completed"] == 5
    jobs = dethpc(ctx, "trial", "describe", str(t["id"]), "--json")
    refs = [j["ref"] for j in json.loads(jobs.stdout)["jobs"]]
    assert refs and all(r.split("_")[0].isdigit() for r in refs), refs   # Slurm job ids


def test_a_new_users_shell_needs_no_config(user_env: dict[str, Any]) -> None:
    """``dethpc shell start -- COMMAND`` with no config anywhere: an allocation on the
    default partition, the command run in it (its output and exit code), the
    allocation ended when it exits."""
    ctx = user_env
    shell = dethpc(ctx, "shell", "start", "--", "bash", "-c",
                   "echo JOB=$SLURM_JOB_ID PARTITION=$SLURM_JOB_PARTITION; exit 7")
    assert shell.returncode == 7, (shell.stdout, shell.stderr)
    m = re.search(r"^JOB=(\d+) PARTITION=(\S+)$", shell.stdout, re.M)
    assert m, (shell.stdout, shell.stderr)
    deadline, left = time.monotonic() + 60, "?"
    while left and time.monotonic() < deadline:       # the allocation ends (CG, then gone)
        left = subprocess.run(["squeue", "-h", "-j", m.group(1)], capture_output=True,
                              text=True, timeout=30).stdout.strip()
        time.sleep(0.5)
    assert left == "", left
    listed = dethpc(ctx, "shell", "list", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [t["state"] for t in json.loads(listed.stdout)] == ["ended"], listed.stdout
