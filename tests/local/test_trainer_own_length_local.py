"""Determined 0.38 length semantics for the PyTorch Trainer under a searcher, local
backend, real daemon, examples/digits.

- ASHA: a trial trains to ``fit(max_length=...)`` when that is shorter than its rung,
  and a trial whose own length ends below its first rung completes there (not
  promoted, not resubmitted, not an error), as Determined's example ``adaptive.yaml``
  with ``train.py --epochs 1`` does. Before that fix the Trainer ignored ``max_length``
  and trained each trial to its rung (16 batches here) and on.
- single, random: ``fit(max_length=...)`` decides the length, also when longer than the
  legacy ``searcher.max_length`` (Determined's ``fit`` uses that only when its own is
  None), through a pause and resume past the searcher's length; a ``fit`` without one
  trains to ``searcher.max_length``. Before that fix the trial stopped at the
  searcher's length.
"""

import json
import shutil
from pathlib import Path

import pytest

from tests.local.conftest import cli, wait_for, write_config

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


SEARCHER_LENGTH = 8
FIT_LENGTH = 20
HPARAMS = {"lr": 0.01, "hidden_size": 16, "dropout": 0.0, "optimizer": "adam",
           "global_batch_size": 16}


def _describe(exp: int) -> dict:
    return json.loads(cli("experiment", "describe", exp, "--json").stdout)


def _validations(trial_id: int) -> list[int]:
    d = json.loads(cli("trial", "describe", trial_id, "--json").stdout)
    return [v["steps"] for v in d["validations"]]


@pytest.mark.parametrize(("searcher", "own"), [
    ({"name": "single"}, FIT_LENGTH),
    ({"name": "random", "max_trials": 2, "max_concurrent_trials": 2}, FIT_LENGTH),
    # no fit(max_length): the legacy searcher.max_length is the length
    ({"name": "single"}, None)])
def test_fit_length_decides_under_single_and_random(home, tmp_path, searcher, own):
    cfg = write_config(
        tmp_path / "c.yaml", name="fit-length",
        entrypoint="python3 train.py" + (f" --batches {own}" if own else ""),
        hyperparameters={**HPARAMS, "lr": {"type": "double", "minval": 0.001,
                                           "maxval": 0.1}},
        min_validation_period={"batches": 6},
        searcher={**searcher, "metric": "validation_loss",
                  "max_length": {"batches": SEARCHER_LENGTH}})
    exp = json.loads(cli("submit", cfg, DIGITS, "--json").stdout)["id"]
    cli("experiment", "wait", exp, "--timeout", "300", timeout=320)
    d = _describe(exp)
    assert d["state"] == "COMPLETED" and d["progress"] == 1.0, d
    assert len(d["trials"]) == searcher.get("max_trials", 1), d["trials"]
    ends = own or SEARCHER_LENGTH
    for t in d["trials"]:
        assert t["state"] == "COMPLETED", t
        assert t["steps_completed"] == ends, t
        assert t["restarts"] == 0, t
        # at the validation period and the end; the searcher's length is no validation
        # point when fit's decides
        assert _validations(t["id"]) == sorted({*range(6, ends, 6), ends}), t


#: the trial held, on its first run, before the batch that makes ``WAIT_AT`` (past the
#: searcher's length) until the daemon's stop file appears, so that a pause lands there
HELD = """
import os, time
from pathlib import Path

import model_def

WAIT_AT = int(os.environ.get("WAIT_AT", "12"))


class Held(model_def.DigitsTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        trial = Path(os.environ["DETHPC_TRIAL_DIR"])
        if batch_idx == WAIT_AT - 1 and not (trial / "held").exists():
            (trial / "held").touch()
            deadline = time.monotonic() + 120
            while not (trial / "stop").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return super().train_batch(batch, epoch_idx, batch_idx)


model_def.DigitsTrial = Held
import train  # noqa: E402

train.main()
"""


def test_fit_length_past_the_searchers_survives_a_pause_and_resume(home, tmp_path):
    """Paused at batch 12 (past searcher.max_length 8), activated: the trial resumes from
    its checkpoint at 12 and still ends at fit's 20, COMPLETED, one stop and one
    completion recorded."""
    context = tmp_path / "digits"
    shutil.copytree(DIGITS, context)
    (context / "held.py").write_text(HELD)
    cfg = write_config(
        tmp_path / "c.yaml", name="fit-length-resume",
        entrypoint=f"python3 held.py --batches {FIT_LENGTH}", hyperparameters=HPARAMS,
        searcher={"name": "single", "metric": "validation_loss",
                  "max_length": {"batches": SEARCHER_LENGTH}})
    exp = json.loads(cli("submit", cfg, context, "--json").stdout)["id"]
    trials = Path(_describe(exp)["run_dir"]) / "trials"
    wait_for(lambda: any(trials.glob("*/held")), timeout=180, what="the held batch")
    cli("experiment", "pause", exp)
    wait_for(lambda: _describe(exp)["trials"][0]["state"] == "PAUSED", timeout=120,
             what="paused trial")
    (paused,) = _describe(exp)["trials"]
    assert paused["steps_completed"] == 12, paused   # checkpointed past the searcher's 8
    cli("experiment", "activate", exp)
    cli("experiment", "wait", exp, "--timeout", "300", timeout=320)
    d = _describe(exp)
    (t,) = d["trials"]
    assert d["state"] == "COMPLETED" and t["state"] == "COMPLETED", d
    assert t["steps_completed"] == FIT_LENGTH, t
    reasons = [json.loads(line)["reason"] for line in
               (trials / str(t["id"]) / "exits.jsonl").read_text().splitlines()]
    assert reasons == ["stopped", "completed"], reasons
    assert _validations(t["id"])[-1] == FIT_LENGTH
