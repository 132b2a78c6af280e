"""Fault injection on the real cluster: the daemon is SIGKILLed between sbatch and the
database commit; after a restart it adopts the job by name instead of submitting again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "tests" / "fixtures" / "toy"


def cli(env, *args, check=True, timeout=300):
    proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_sigkill_between_sbatch_and_commit_submits_nothing_twice(tmp_path, slurm_cluster):
    home = tmp_path / "home"
    home.mkdir()
    (home / "cluster.yaml").write_text(yaml.safe_dump({
        "backend": "slurm", "runs_root": str(home / "runs"), "tick_min_s": 0.2,
        "tick_max_s": 1.0, "pools": {"default": {"partition": "debug"}}}))
    env = {**os.environ, "DETHPC_HOME": str(home),
           "DETHPC_CLUSTER_CONFIG": str(home / "cluster.yaml")}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "fault", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6},
                            "step_time": 0.05},
        "searcher": {"name": "random", "metric": "validation_loss", "max_trials": 4,
                     "max_concurrent_trials": 4, "max_length": {"batches": 10}}}))
    exp = json.loads(cli(env, "submit", cfg, TOY, "--no-daemon", "--json").stdout)["id"]
    crashed = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "daemon", "run"],
                             env={**env, "DETHPC_FAULT_POINT": "after_sbatch"},
                             capture_output=True, timeout=120)
    assert crashed.returncode == -signal.SIGKILL
    try:
        cli(env, "daemon", "start")
        cli(env, "experiment", "wait", exp, "--timeout", "240", timeout=300)
    finally:
        cli(env, "daemon", "stop", check=False)
    events = json.loads(cli(env, "experiment", "events", exp, "--json").stdout)
    adopted = [e for e in events if e["kind"] == "adopted"]
    submitted = [e for e in events if e["kind"] == "submitted"]
    assert len(adopted) == 1 and submitted == [], events
    d = json.loads(cli(env, "experiment", "describe", exp, "--json").stdout)
    assert d["state"] == "COMPLETED" and len(d["trials"]) == 4
    # every trial ran exactly once: the adopted array was the only one
    for t in d["trials"]:
        exits = (Path(d["run_dir"]) / "trials" / str(t["id"]) / "exits.jsonl").read_text()
        assert [json.loads(line)["reason"] for line in exits.splitlines()] == ["completed"]
