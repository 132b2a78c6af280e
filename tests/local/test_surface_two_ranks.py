"""What Determined serves without a master, across two real gloo ranks on this machine
(Determined's local mode gives no two-rank oracle that shards data as dethpc does, so the
two-rank run is compared with dethpc's own one-rank run of the same trials, from
``tests/fixtures/oracle/surface_trials.py``): custom reducers combine every rank's
values (sums and maxima equal the one-rank ones), ``evaluate_full_dataset`` runs on the
chief over the whole validation set, Determined's evaluation reducers reduce across
ranks, and callbacks run on every rank in the same order (the chief alone writes
checkpoints, so the save hooks are its own) with the same metrics."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "oracle"

RANK = """
import json, os, sys
import torch
sys.path.insert(0, sys.argv[1])
torch.set_num_threads(1)
import surface_trials as st
det = st.det
# one process group for the four trials, as a program that runs several would: set up
# and torn down per trial on the one MASTER_PORT, a rank could meet the previous
# trial's store (f41: one rank in the next trial's DDP, the other in its rendezvous)
import torch.distributed as dist
dist.init_process_group("gloo")
distributed = det.core.DistributedContext.from_torch_distributed()
out = {}
for name in ("ReducerTrial", "FullDatasetTrial", "EvalReducerTrial", "CallbackTrial"):
    reports = {"training": [], "validation": []}
    st.EVENTS.clear()
    with det.pytorch.init(hparams={"global_batch_size": 4, "model_seed": 3},
                          distributed=distributed) as context:
        train = context.core.train
        def hook(kind, real):
            def record(steps_completed, metrics, *a, **k):
                reports[kind].append({"steps": steps_completed,
                                      "metrics": st._floats(metrics)})
                return real(steps_completed, metrics, *a, **k)
            return record
        train.report_training_metrics = hook("training", train.report_training_metrics)
        train.report_validation_metrics = hook("validation", train.report_validation_metrics)
        trial = getattr(st, name)(context)
        det.pytorch.Trainer(trial, context).fit(
            max_length=det.pytorch.Batch(8), validation_period=det.pytorch.Batch(4),
            checkpoint_period=det.pytorch.Batch(100), reporting_period=det.pytorch.Batch(4),
            step_zero_validation=True)
        out[name] = {"reports": reports, "events": list(st.EVENTS),
                     "rank": context.distributed.rank}
with open(sys.argv[2], "w") as f:
    json.dump(out, f)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def finish(procs: list[subprocess.Popen[str]], timeout_s: float) -> list[str]:
    """Every rank's output once all have ended; past ``timeout_s`` (a rank waiting for a
    peer that died: f41 saw one wait 600 s and said nothing) all are killed and the test
    fails with what each printed."""
    import time

    deadline = time.monotonic() + timeout_s
    outs: list[str] = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            rest = [q.communicate()[0] for q in procs]
            pytest.fail(f"the ranks did not end within {timeout_s:.0f} s: "
                        f"{[o[-3000:] for o in rest]}")
    return outs


def run(tmp: Path, world: int) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DET_", "DETHPC_", "SLURM_"))}
    env.update({"PYTHONPATH": str(REPO), "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                "ORACLE_DET": "dethpc"})
    procs = []
    for r in range(world):
        work = tmp / f"w{world}" / str(r)
        work.mkdir(parents=True)
        procs.append(subprocess.Popen(
            [sys.executable, "-c", RANK, str(FIXTURES), str(work / "out.json")], cwd=work,
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    outs = finish(procs, timeout_s=300)
    assert [p.returncode for p in procs] == [0] * world, [o[-3000:] for o in outs]
    return [json.loads((tmp / f"w{world}" / str(r) / "out.json").read_text())
            for r in range(world)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[dict[str, Any]]]:
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("two-ranks")
    return {1: run(tmp, 1), 2: run(tmp, 2)}


def _val(runs: dict[int, list[dict[str, Any]]], world: int, trial: str) -> list[Any]:
    return [r["metrics"] for r in runs[world][0][trial]["reports"]["validation"]]


def test_custom_reducers_combine_every_rank(runs: dict[int, list[dict[str, Any]]]) -> None:
    one, two = _val(runs, 1, "ReducerTrial"), _val(runs, 2, "ReducerTrial")
    assert len(one) == len(two) == 3
    for a, b in zip(one, two, strict=True):
        # every validation record's error, summed over both ranks' shards
        assert b["abs_err_sum"] == pytest.approx(a["abs_err_sum"], rel=1e-5)
        assert b["worst_batch"] == pytest.approx(a["worst_batch"], rel=1e-5)
        # one update per batch: 3 batches of 4 in one rank, 2 x 3 of 2 in two
        assert (a["abs_err_n"], b["abs_err_n"]) == (3.0, 6.0)
    train_one = [r["metrics"]["train_updates"] for r in
                 runs[1][0]["ReducerTrial"]["reports"]["training"]]
    train_two = [r["metrics"]["train_updates"] for r in
                 runs[2][0]["ReducerTrial"]["reports"]["training"]]
    assert train_two == [2 * n for n in train_one] and train_one == [4.0, 4.0]


def test_full_dataset_runs_on_the_chief_over_everything(
        runs: dict[int, list[dict[str, Any]]]) -> None:
    one, two = _val(runs, 1, "FullDatasetTrial"), _val(runs, 2, "FullDatasetTrial")
    assert [m["val_n"] for m in two] == [10.0] * 3
    for a, b in zip(one, two, strict=True):
        assert b["val_mae"] == pytest.approx(a["val_mae"], rel=1e-5)
        assert b["val_max"] == pytest.approx(a["val_max"], rel=1e-5)


def test_evaluation_reducers_reduce_across_ranks(runs: dict[int, list[dict[str, Any]]]) -> None:
    one, two = _val(runs, 1, "EvalReducerTrial"), _val(runs, 2, "EvalReducerTrial")
    for a, b in zip(one, two, strict=True):
        assert b["err_sum"] == pytest.approx(a["err_sum"], rel=1e-5)
        assert b["err_max"] == pytest.approx(a["err_max"], rel=1e-5)
        assert b["err_min"] == pytest.approx(a["err_min"], rel=1e-5)


def test_callbacks_run_on_every_rank_in_the_same_order(
        runs: dict[int, list[dict[str, Any]]]) -> None:
    chief_only = {"state_dict", "on_checkpoint_save_start", "on_checkpoint_end",
                  "on_checkpoint_write_end"}
    rank0, rank1 = (r["CallbackTrial"]["events"] for r in runs[2])
    shared0 = [e for e in rank0 if e[1] not in chief_only]
    # every rank: the same hooks with the same (rank-combined) metrics; the validation
    # outputs are each rank's own batches
    assert [e for e in shared0 if e[1] != "on_validation_epoch_end"] == [
        e for e in rank1 if e[1] != "on_validation_epoch_end"]
    assert [e[1] for e in rank1 if e[1] in chief_only] == []
    assert {e[1] for e in rank0} >= chief_only | {"on_checkpoint_upload_end"}
    one = [e[1] for e in runs[1][0]["CallbackTrial"]["events"]]
    assert [e[1] for e in rank0] == one   # the same sequence as one rank
