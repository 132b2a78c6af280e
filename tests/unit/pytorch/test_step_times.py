"""Issue 35 item 4: each rank's own time per step. The Trainer gives ``StepTimes`` a
step's busy time without DDP's waits for the other ranks (what ``backward()`` took: the
gradient all-reduce; and the head of the wrapped model's forward: its buffer broadcast),
and the rank's file holds the window's medians."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import dethpc as det  # noqa: E402
import dethpc.core as core  # noqa: E402
from dethpc.core._steps import FIRST, StepTimes  # noqa: E402
from dethpc.pytorch._state import preserved_rng  # noqa: E402

FORWARD_S = 0.02    # the rank's own work, before its forward pass
BACKWARD_S = 0.3    # "waiting in the all-reduce": a backward that sleeps
BROADCAST_S = 0.3   # "waiting for rank 0's buffers": a wrapper that sleeps, as DDP's would


class _Wait(torch.autograd.Function):
    """Identity forward; its backward sleeps ``BACKWARD_S`` (a rank waiting for others)."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        time.sleep(BACKWARD_S)
        return grad


class Broadcast(torch.nn.Module):
    """Stands for DDP's wrapper: waits (its buffer broadcast), then runs the module."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: Any) -> Any:
        time.sleep(BROADCAST_S)
        return self.inner(x)


class Waiting(det.pytorch.PyTorchTrial):
    def __init__(self, context: Any) -> None:
        self.context = context
        inner = context.wrap_model(torch.nn.Linear(1, 1))
        self.model = Broadcast(inner)
        context._time_forward_sync(self.model, inner)   # what wrap_model does under DDP
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

    def _data(self) -> Any:
        return det.pytorch.DataLoader(torch.utils.data.TensorDataset(torch.ones(16, 1)),
                                      batch_size=2)

    def build_training_data_loader(self) -> Any:
        return self._data()

    def build_validation_data_loader(self) -> Any:
        return self._data()

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        time.sleep(FORWARD_S)
        loss = _Wait.apply(self.model(batch[0])).pow(2).mean()
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        return {"val": self.model(batch[0]).mean()}


def test_busy_time_leaves_out_what_ddp_waits_for(tmp_path: Path) -> None:
    trial_dir = tmp_path / "exp" / "trials" / "1"
    trial_dir.mkdir(parents=True)
    (trial_dir / "hparams.json").write_text("{}")
    env = {"DETHPC_TRIAL_DIR": str(trial_dir), "DETHPC_TRIAL_ID": "1",
           "DETHPC_EXPERIMENT_ID": "1"}
    out = trial_dir / "ranks" / "0.json"
    with preserved_rng(), core.init(env=env, exit_on_preempt=False) as ctx:
        assert ctx.step_times is None   # one rank: nothing to compare
        ctx.step_times = StepTimes(out, rank=0, world=2, node="n1", run=0)
        context = det.pytorch.PyTorchTrialContext(ctx)
        det.pytorch.Trainer(Waiting(context), context).fit(max_length=det.pytorch.Batch(6))
    rec = json.loads(out.read_text())   # written when the context closed
    assert {k: rec[k] for k in ("rank", "world", "node", "run", "steps")} == {
        "rank": 0, "world": 2, "node": "n1", "run": 0, "steps": 6}
    # its own work counts, the waits in backward and before the module do not (with
    # margin for a busy machine)
    assert FORWARD_S <= rec["busy_s"] < min(BACKWARD_S, BROADCAST_S), rec
    assert rec["step_s"] >= FORWARD_S + BACKWARD_S + BROADCAST_S, rec


def test_step_times_write_medians_after_the_first_steps(tmp_path: Path) -> None:
    out = tmp_path / "ranks" / "3.json"
    times = StepTimes(out, rank=3, world=4, node="n2", run=1)
    for i in range(FIRST - 1):
        times.add(0.1 * (i + 1), 1.0)
    assert not out.exists()
    times.add(5.0, 9.0)             # one outlier: the median is not moved by it
    rec = json.loads(out.read_text())
    assert rec["steps"] == FIRST and rec["busy_s"] == pytest.approx(0.3)
    assert rec["step_s"] == 1.0 and rec["rank"] == 3 and rec["run"] == 1


def test_a_rank_that_cannot_write_trains_on(tmp_path: Path, caplog: Any) -> None:
    (tmp_path / "ranks").write_text("a file where the directory should be")
    times = StepTimes(tmp_path / "ranks" / "0.json", rank=0, world=2, node="n1", run=0)
    for _ in range(FIRST + 2):
        times.add(0.1, 0.2)
    times.write()
    assert caplog.text.count("cannot write step times") == 1
