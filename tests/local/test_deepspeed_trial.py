"""Determined's DeepSpeed Trial API on CPU DeepSpeed (fp32, ZeRO stage 0 and 1).

``tests/fixtures/deepspeed/ds_trial.py`` (a linear DeepSpeedTrial written as Determined's
documentation shows) runs as real processes: one rank, and two ranks over torch.distributed
gloo (env:// on this machine). A run stopped after 3 of 8 batches (``set_stop_requested``)
and resumed from its checkpoint (``engine.load_checkpoint`` on every rank) must give the
same losses, LR and final weights as an uninterrupted run, bit for bit; and the
uninterrupted run must equal a plain DeepSpeed loop over the same batches (Determined's own
DeepSpeedTrial cannot be the oracle here: its context refuses to start without a GPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepspeed")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "fixtures" / "deepspeed" / "ds_trial.py"


def _trial_dir(root: Path) -> Path:
    trial = root / "exp" / "trials" / "1"
    trial.mkdir(parents=True)
    (trial / "hparams.json").write_text("{}")
    return trial


def _run(root: Path, mode: str, name: str, ranks: int = 1, stage: int = 1,
         **extra: str) -> list[dict[str, Any]]:
    env = dict(os.environ)
    env.update({"DS_ACCELERATOR": "cpu", "DETHPC_TRIAL_ID": "1", "DETHPC_EXPERIMENT_ID": "1",
                "DETHPC_TRIAL_DIR": str(root / "exp" / "trials" / "1"),
                "PYTHONPATH": str(REPO), "DS_STAGE": str(stage), "OMP_NUM_THREADS": "1",
                **extra})
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "DETHPC_RUN_ID"):
        env.pop(key, None)
    out = root / f"{name}.json"
    procs = []
    for rank in range(ranks):
        if ranks > 1:
            env.update({"WORLD_SIZE": str(ranks), "RANK": str(rank), "LOCAL_RANK": str(rank),
                        "LOCAL_WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(29400 + os.getpid() % 500)})
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT), mode, str(out)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    for proc in procs:
        log, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, log[-3000:]
    files = [out] + [Path(f"{out}.{r}") for r in range(1, ranks)]
    return [json.loads(f.read_text()) for f in files]


def _stopped_and_resumed(root: Path, ranks: int, stage: int) -> list[dict[str, Any]]:
    first = _run(root, "trial", "first", ranks, stage, STOP_AT="3")
    assert [r["batches"] for r in first] == [3] * ranks
    assert len({r["uuid"] for r in first}) == 1
    second = _run(root, "trial", "second", ranks, stage, RESUME=first[0]["uuid"])
    return [{**b, "losses": a["losses"] + b["losses"]} for a, b in zip(first, second,
                                                                     strict=True)]


@pytest.mark.parametrize("stage", [0, 1])
def test_one_rank_resumes_bit_identical_and_equals_a_plain_deepspeed_loop(
        tmp_path: Path, stage: int) -> None:
    _trial_dir(tmp_path / "a")
    _trial_dir(tmp_path / "b")
    (whole,) = _run(tmp_path / "a", "trial", "whole", stage=stage)
    (plain,) = _run(tmp_path / "a", "plain", "plain", stage=stage)
    (resumed,) = _stopped_and_resumed(tmp_path / "b", 1, stage)
    assert len(whole["losses"]) == 8 and whole["batches"] == 8
    assert plain["losses"] == whole["losses"]
    assert plain["weights"] == whole["weights"]
    assert resumed["losses"] == whole["losses"]
    assert resumed["weights"] == whole["weights"]
    assert resumed["lr"] == whole["lr"]
    # the trial's metrics reached core: 8 training reports, validations at 4 and 8
    lines = [json.loads(x) for x in (tmp_path / "a" / "exp" / "trials" / "1" /
                                     "metrics.jsonl").read_text().splitlines()]
    assert [x["steps"] for x in lines if x["kind"] == "training"] == list(range(1, 9))
    assert [x["steps"] for x in lines if x["kind"] == "validation"] == [4, 8]
    checkpoints = tmp_path / "b" / "exp" / "trials" / "1" / "checkpoints"
    written = {p.name for p in checkpoints.glob("*/model0/*")}
    assert "mp_rank_00_model_states.pt" in written


def test_two_ranks_train_in_step_and_resume_bit_identical(tmp_path: Path) -> None:
    _trial_dir(tmp_path / "a")
    _trial_dir(tmp_path / "b")
    whole = _run(tmp_path / "a", "trial", "whole", ranks=2)
    resumed = _stopped_and_resumed(tmp_path / "b", 2, 1)
    assert [r["world"] for r in whole] == [2, 2]
    # each rank its own shard of the data, one model
    assert whole[0]["losses"] != whole[1]["losses"]
    assert whole[0]["weights"] == whole[1]["weights"]
    for done, again in zip(whole, resumed, strict=True):
        assert again["losses"] == done["losses"]
        assert again["weights"] == done["weights"]
    checkpoints = tmp_path / "b" / "exp" / "trials" / "1" / "checkpoints"
    optim = {p.name for p in checkpoints.glob("*/model0/*optim_states.pt")}
    assert optim == {"zero_pp_rank_0_mp_rank_00_optim_states.pt",
                     "zero_pp_rank_1_mp_rank_00_optim_states.pt"}  # ZeRO 1: one per rank


def test_gradient_accumulation_calls_train_batch_per_micro_batch(tmp_path: Path) -> None:
    """gradient_accumulation_steps 2: a batch is two train_batch calls (as Determined's),
    the engine steps once per two micro batches, the same as the plain loop's."""
    _trial_dir(tmp_path)
    (whole,) = _run(tmp_path, "trial", "whole", GAS="2", BATCHES="4")
    (plain,) = _run(tmp_path, "plain", "plain", GAS="2", BATCHES="8")
    assert whole["batches"] == 4 and len(whole["losses"]) == 8
    assert whole["losses"] == plain["losses"]
    assert whole["weights"] == plain["weights"]


def test_preempted_by_signal_at_a_batch_boundary_resumes_bit_identical(tmp_path: Path) -> None:
    """SIGUSR2 (the job's preemption signal) mid-run: the Trainer checkpoints at the next
    batch boundary and returns; the resumed run ends as the uninterrupted one."""
    import signal
    import time

    _trial_dir(tmp_path / "a")
    trial_b = _trial_dir(tmp_path / "b")
    (whole,) = _run(tmp_path / "a", "trial", "whole")
    env = dict(os.environ)
    env.update({"DS_ACCELERATOR": "cpu", "DETHPC_TRIAL_ID": "1", "DETHPC_EXPERIMENT_ID": "1",
                "DETHPC_TRIAL_DIR": str(trial_b), "PYTHONPATH": str(REPO),
                "DETHPC_PREEMPT_SIGNAL": "USR2", "SLOW_S": "0.5", "OMP_NUM_THREADS": "1"})
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "DETHPC_RUN_ID"):
        env.pop(key, None)
    out = tmp_path / "b" / "first.json"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "trial", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = trial_b / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and metrics.read_text().count('"training"') >= 2:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGUSR2)
    log, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, log[-3000:]
    first = json.loads(out.read_text())
    assert 2 <= first["batches"] < 8, first["batches"]
    (second,) = _run(tmp_path / "b", "trial", "second", RESUME=first["uuid"])
    assert first["losses"] + second["losses"] == whole["losses"]
    assert second["weights"] == whole["weights"]
