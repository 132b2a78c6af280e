"""Determined's model-debugging ladder on the dev cluster, through the CLI (issue 12, item 4).

Step 7: ``dethpc e create CONFIG DIR --test`` with ``slots_per_trial: 1`` submits a
one-batch test experiment to Slurm, follows it, and exits 0 when it completed;
step 9: the same with ``slots_per_trial: 2`` runs on two nodes (the context's
``startup-hook.sh`` ran on both); step 8: the full search with ``--follow``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "tests" / "fixtures" / "toy"
HOOK = 'echo "hook $SLURMD_NODENAME" >>"$DETHPC_TRIAL_DIR/hooks.log"\n'


def cli(env: dict[str, str], *args: Any, check: bool = True,
        timeout: float = 400) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def env(tmp_path: Path, slurm_cluster: Any) -> Iterator[dict[str, str]]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "cluster.yaml").write_text(yaml.safe_dump({
        "backend": "slurm", "runs_root": str(home / "runs"), "tick_min_s": 0.2,
        "tick_max_s": 1.0, "python": sys.executable, "pools": {"default": {
            "partition": "debug", "slots_per_node": 1, "cpus_per_slot": 1}}}))
    e = {**os.environ, "DETHPC_HOME": str(home),
         "DETHPC_CLUSTER_CONFIG": str(home / "cluster.yaml")}
    yield e
    for exp in json.loads(cli(e, "e", "list", "--json").stdout):
        if exp["state"] not in ("COMPLETED", "ERROR", "CANCELED"):
            cli(e, "e", "kill", exp["id"], check=False)
    cli(e, "daemon", "stop", check=False)


def config(tmp_path: Path, slots: int, trials: int = 3) -> Path:
    path = tmp_path / f"c{slots}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "ladder", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6},
                            "step_time": 0.05},
        "searcher": {"name": "random", "metric": "validation_loss", "max_trials": trials,
                     "max_length": {"batches": 20}},
        "resources": {"slots_per_trial": slots}}))
    return path


def test_cluster_test_mode_then_full_run(env: dict[str, str], tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    shutil.copy(TOY / "train.py", ctx / "train.py")
    (ctx / "startup-hook.sh").write_text(HOOK)

    for slots in (1, 2):  # steps 7 and 9
        out = cli(env, "experiment", "create", config(tmp_path, slots), ctx, "--test")
        assert "passed (COMPLETED)" in out.stderr, out.stderr
        exp_id = int(out.stdout.split("Created test experiment ")[1].split()[0])
        d = json.loads(cli(env, "e", "describe", exp_id, "--json").stdout)
        (trial,) = d["trials"]
        assert trial["steps_completed"] == 1 and trial["best_checkpoint"], trial
        hooks = (Path(d["run_dir"]) / "trials" / str(trial["id"]) / "hooks.log")
        nodes = hooks.read_text().split()[1::2]
        assert len(nodes) == slots and len(set(nodes)) == slots, nodes

    out = cli(env, "e", "create", config(tmp_path, 1, trials=2), ctx, "-f")  # step 8
    exp_id = int(out.stdout.split("Created experiment ")[1].split()[0])
    assert f"experiment {exp_id} COMPLETED" in out.stdout
    d = json.loads(cli(env, "e", "describe", exp_id, "--json").stdout)
    assert [t["steps_completed"] for t in d["trials"]] == [20, 20]
