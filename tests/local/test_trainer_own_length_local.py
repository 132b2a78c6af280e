"""Determined 0.38 length semantics for the PyTorch Trainer under a searcher: the
trial trains to ``fit(max_length=...)`` when that is shorter than the searcher's
target, and a trial whose own length ends below its first ASHA rung completes there
(not promoted, not resubmitted, not an error), as Determined's example
``adaptive.yaml`` with ``train.py --epochs 1`` does. Local backend, real daemon,
examples/digits. Before the fix the Trainer ignored ``max_length`` and trained each
trial to its rung (16 batches here) and on."""

import json
from pathlib import Path

import pytest

from tests.local.conftest import cli, write_config

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"
OWN = 5          # the script's own length, below the first rung
RUNGS = (16, 64)  # divisor 4, max_rungs 2, max_length 64


@pytest.mark.parametrize("variant", ["stopping", "promotion"])
def test_asha_trial_shorter_than_its_rung_completes_at_its_own_length(home, tmp_path,
                                                                      variant):
    cfg = write_config(
        tmp_path / "c.yaml", name="own-length", entrypoint=f"python3 train.py --batches {OWN}",
        hyperparameters={"lr": {"type": "double", "minval": 0.001, "maxval": 0.1},
                         "hidden_size": 16, "dropout": 0.0, "optimizer": "adam",
                         "global_batch_size": 16},
        searcher={"name": "adaptive_asha", "metric": "validation_loss", "max_trials": 4,
                  "max_concurrent_trials": 4, "divisor": 4, "max_rungs": 2,
                  "mode": "aggressive", "variant": variant, "max_length": {"batches": RUNGS[-1]}})
    exp = json.loads(cli("submit", cfg, DIGITS, "--json").stdout)["id"]
    cli("experiment", "wait", exp, "--timeout", "300", timeout=320)
    d = json.loads(cli("experiment", "describe", exp, "--json").stdout)
    assert d["state"] == "COMPLETED", d
    assert len(d["trials"]) == 4, d["trials"]
    for t in d["trials"]:
        assert t["state"] == "COMPLETED", t
        assert t["steps_completed"] == OWN, t      # its own length: none trained past it
        assert t["restarts"] == 0, t                # not resubmitted
        assert t["best_validation"] is not None, t
