"""``dethpc sbatch --search`` on the local backend: the same array and wrapper run as
plain processes. A grid over a script that knows nothing of dethpc completes; each
trial's output (the wrapper's, in the trial directory: the local backend has no
``--output``) shows its hyperparameter values and arguments, read back through
``dethpc trial logs``; the script ran in the submit directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PLAIN = REPO / "tests" / "slurm" / "fixtures" / "existing_scripts" / "search_plain.sh"


def cli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    assert proc.returncode == 0, f"{args}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_grid_over_a_plain_script_on_the_local_backend(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy2(PLAIN, project / "search_plain.sh")
    (project / "search.yaml").write_text(yaml.safe_dump({
        "searcher": {"name": "grid", "metric": "loss"},
        "hyperparameters": {"lr": {"type": "categorical", "vals": [0.1, 0.01]},
                            "name": "it's a $HOME"}}))
    exp_id = cli(project, "sbatch", "--no-daemon", "--parsable", "--search", "search.yaml",
                 "search_plain.sh", "x y", env={"SEARCH_TEST_MARK": "loc"}).strip()
    cli(project, "daemon", "run", "--until-idle")
    d = json.loads(cli(project, "experiment", "describe", exp_id, "--json"))
    assert d["state"] == "COMPLETED" and [t["state"] for t in d["trials"]] == ["COMPLETED"] * 2
    logs = {t["hparams"]["lr"]: cli(project, "trial", "logs", str(t["id"]))
            for t in d["trials"]}
    for lr, text in logs.items():
        assert f"lr={lr} name=it's a $HOME args=x y cwd={project}" in text, text
        assert "from submit env: loc" in text, text
