"""Test mode (``--local --test``) and off-cluster runs of examples/digits, no DDP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from dethpc.core import CheckpointContext, DistributedContext  # noqa: E402
from dethpc.pytorch import entrypoint_argv, run_test_mode  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits"
HPARAMS = {"lr": 0.01, "hidden_size": 16, "dropout": 0.0, "optimizer": "sgd",
           "global_batch_size": 32}


def _records(trial: Path) -> list[dict]:
    return [json.loads(line) for line in (trial / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.torch
@pytest.mark.parametrize("entrypoint", ["model_def:DigitsTrial", "python3 train.py"])
def test_test_mode_trains_one_batch_validates_checkpoints(tmp_path: Path,
                                                          entrypoint: str) -> None:
    code = run_test_mode(entrypoint, DIGITS, HPARAMS, workdir=tmp_path,
                         experiment_config={"name": "digits"})
    assert code == 0
    trial = tmp_path / "trials" / "0"
    kinds = [(r["kind"], r["steps"]) for r in _records(trial)]
    assert kinds == [("training", 1), ("validation", 1), ("checkpoint", 1)]
    ckpts = CheckpointContext(trial / "checkpoints", DistributedContext())
    uuid = ckpts.latest()
    assert uuid is not None and ckpts.info(uuid).steps_completed == 1
    assert (trial / "checkpoints" / uuid / "state.pt").is_file()


@pytest.mark.torch
def test_test_mode_reports_failure(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    code = run_test_mode("model_def:DigitsTrial", DIGITS, {"lr": 0.1}, workdir=tmp_path)
    err = capfd.readouterr().err
    # hidden_size is missing: a DethpcError, one clear message and exit 1, no traceback
    assert code == 1, err
    assert "hyperparameter 'hidden_size' is not defined; defined: lr" in err
    assert "Traceback" not in err


def test_entrypoint_argv() -> None:
    assert entrypoint_argv("model_def:DigitsTrial", "py") == \
        ["py", "-m", "dethpc.pytorch.run", "model_def:DigitsTrial"]
    assert entrypoint_argv("python3 train.py --x 'a b'", "py") == \
        ["py", "train.py", "--x", "a b"]
    assert entrypoint_argv(["bash", "run.sh"]) == ["bash", "run.sh"]


@pytest.mark.torch
def test_train_py_runs_off_cluster(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETHPC_")}
    env.update({"PYTHONPATH": str(REPO), "DETHPC_CHECKPOINT_DIR": str(tmp_path / "ck")})
    proc = subprocess.run([sys.executable, "train.py", "--batches", "12"], cwd=DIGITS, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"kind": "validation", "steps": 12' in proc.stderr
    ckpts = CheckpointContext(tmp_path / "ck", DistributedContext())
    uuid = ckpts.latest()
    assert uuid is not None and ckpts.info(uuid).steps_completed == 12


@pytest.mark.parametrize(("name", "searcher", "trials"), [
    ("const", "single", 1), ("random", "random", 8), ("grid", "grid", 8),
    ("adaptive", "adaptive_asha", 16)])
def test_example_configs_validate(name: str, searcher: str, trials: int) -> None:
    from dethpc.config.experiment import load_experiment_config

    cfg = load_experiment_config(DIGITS / f"{name}.yaml")
    assert cfg.searcher.name == searcher and cfg.searcher.max_trials == trials
    assert cfg.searcher.metric == "validation_loss" and cfg.searcher.smaller_is_better
    assert not cfg.warnings
