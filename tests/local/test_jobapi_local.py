"""The shell-level job API inside a trial, end to end on the local backend: a bash
training loop (tests/slurm/fixtures/existing_scripts/search_train.sh, run through
``dethpc sbatch --search`` and ``daemon run --until-idle``) calls ``dethpc report
metrics``, ``dethpc should-stop`` and ``dethpc report checkpoint`` from the bin shim on
its PATH; the store sees its validation metrics and its checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "slurm" / "fixtures" / "existing_scripts"


def cli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    assert proc.returncode == 0, f"{args}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_a_bash_loop_reports_metrics_and_a_checkpoint(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name in ("search_train.sh", "search_step.py"):
        shutil.copy2(FIXTURES / name, project / name)
    (project / "search.yaml").write_text(yaml.safe_dump({
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 5}},
        "hyperparameters": {"lr": 0.01}}))
    exp_id = cli(project, "sbatch", "--no-daemon", "--parsable", "--search", "search.yaml",
                 "search_train.sh", env={"STEP_PAUSE_S": "0"}).strip()
    cli(project, "daemon", "run", "--until-idle")
    d = json.loads(cli(project, "experiment", "describe", exp_id, "--json"))
    (trial,) = d["trials"]
    assert (d["state"], trial["state"], trial["steps_completed"]) == (
        "COMPLETED", "COMPLETED", 5), d
    assert trial["best_checkpoint"], trial
    tdir = Path(d["run_dir"]) / "trials" / str(trial["id"])
    records = [json.loads(x) for x in (tdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["steps"] for r in records if r["kind"] == "validation"] == [1, 2, 3, 4, 5]
    (ck,) = [r for r in records if r["kind"] == "checkpoint"]
    stored = tdir / "checkpoints" / ck["uuid"] / "step-5"
    assert (ck["steps"], (stored / "step").read_text()) == (5, "5\n")
    assert not (tdir / "stop-acks.jsonl").exists()
    # the next run would resume from it
    latest = subprocess.run([sys.executable, "-m", "dethpc.surfaces.entry", "latest-checkpoint"],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(REPO),
                                 "DETHPC_TRIAL_DIR": str(tdir)})
    assert (latest.returncode, latest.stdout) == (0, f"{stored}\n")
