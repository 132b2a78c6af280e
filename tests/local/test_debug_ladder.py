"""Determined's model-debugging ladder with dethpc, step by step (issue 12, item 4),
on the local backend (the Slurm tier repeats the cluster steps on the dev cluster).

1. ``experiment create CONFIG DIR --local --test``: this shell, one batch, no daemon;
2. ``--local``: the first trial to its full length in this shell;
3. ``--test``: a one-batch, one-trial experiment through the daemon and the backend,
   followed to its end; exit 0 only when it completed (1 when it failed);
4. a full run with ``--follow``: the first trial's log streams until the end.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.local.conftest import TOY, cli, write_config

HOOK = 'echo "hook ran for trial $DETHPC_TRIAL_ID"\n'


@pytest.fixture
def ctx(tmp_path: Path) -> Path:
    d = tmp_path / "ctx"
    d.mkdir()
    shutil.copy(TOY / "train.py", d / "train.py")
    (d / "startup-hook.sh").write_text(HOOK)
    return d


def describe(exp_id: int) -> dict:
    return json.loads(cli("experiment", "describe", exp_id, "--json").stdout)


def test_local_test_then_local_run_in_this_shell(home: Path, tmp_path: Path, ctx: Path) -> None:
    cfg = write_config(tmp_path / "c.yaml")
    out = cli("experiment", "create", cfg, ctx, "--local", "--test")
    assert "test mode passed" in out.stdout
    out = cli("e", "create", cfg, ctx, "--local")
    assert "local run completed" in out.stdout
    trial = Path(out.stdout.split("trial directory ")[1].split()[0])
    steps = [json.loads(line)["steps"] for line in (trial / "metrics.jsonl").read_text()
             .splitlines() if json.loads(line)["kind"] == "training"]
    assert max(steps) == 10  # the searcher's max_length, not test mode's one batch
    assert not (home / "runs").exists()  # nothing recorded, no daemon


def test_cluster_test_mode_runs_one_batch_and_says_whether_it_passed(
        home: Path, tmp_path: Path, ctx: Path) -> None:
    cfg = write_config(tmp_path / "c.yaml")
    out = cli("experiment", "create", cfg, ctx, "--test", timeout=240)
    assert "hook ran for trial" in out.stdout  # the first trial's log, streamed
    assert "passed (COMPLETED)" in out.stderr
    exp_id = int(out.stdout.split("Created test experiment ")[1].split()[0])
    d = describe(exp_id)
    assert d["state"] == "COMPLETED" and d["searcher"]["name"] == "single"
    assert "test-mode" in d["labels"] and d["description"].startswith("[test-mode]")
    (trial,) = d["trials"]
    assert trial["steps_completed"] == 1 and trial["best_checkpoint"]

    failing = write_config(tmp_path / "bad.yaml", hyperparameters={"fail": True})
    proc = cli("experiment", "create", failing, ctx, "--test", check=False, timeout=240)
    assert proc.returncode == 1, proc.stderr
    assert "toy: failing on purpose" in proc.stdout
    assert "failed" in proc.stderr and "Traceback" not in proc.stderr


def test_full_run_follows_the_first_trial(home: Path, tmp_path: Path, ctx: Path) -> None:
    cfg = write_config(tmp_path / "c.yaml", searcher={
        "name": "random", "metric": "validation_loss", "max_trials": 2,
        "max_length": {"batches": 5}})
    out = cli("experiment", "create", cfg, ctx, "--follow", timeout=240)
    assert "hook ran for trial" in out.stdout
    exp_id = int(out.stdout.split("Created experiment ")[1].split()[0])
    assert f"experiment {exp_id} COMPLETED" in out.stdout
    assert len(describe(exp_id)["trials"]) == 2


def test_e_logs_and_t_logs_follow_until_the_trial_ends(home: Path, tmp_path: Path,
                                                       ctx: Path) -> None:
    cfg = write_config(tmp_path / "c.yaml", searcher={
        "name": "single", "metric": "validation_loss", "max_length": {"batches": 20}},
        hyperparameters={"x": 1.0, "step_time": 0.05})
    exp_id = json.loads(cli("e", "create", cfg, ctx, "--json").stdout)["id"]
    # Determined's `det e logs -f`: waits for the first trial, streams it to its end
    out = cli("e", "logs", exp_id, "-f", timeout=240).stdout
    assert "hook ran for trial" in out
    assert out.rstrip().endswith("dethpc: training exited with code 0 (completed)"), out[-500:]
    (trial,) = describe(exp_id)["trials"]
    assert cli("t", "logs", trial["id"], "-f").stdout == out  # ended: prints all, returns
    assert cli("t", "logs", trial["id"], "--tail", "1").stdout.strip() == \
        "dethpc: training exited with code 0 (completed)"
