"""What Determined serves without a master beyond the basic Trainer loop, called as
Determined 0.38's documentation shows it and checked against what Determined gives
(tests/local/test_determined_oracle.py runs the same calls under Determined 0.38.1 and
compares): ``PyTorchCallback`` (every hook, its state saved and restored on a resume),
``MetricReducer`` and ``wrap_reducer``, ``evaluate_full_dataset``,
``experimental.use_amp`` and ``autocast_forward_pass``, ``det.pytorch.samplers`` with
``adapt_batch_sampler``, and ``load_trial_from_checkpoint_path`` /
``CheckpointLoadContext`` (a fine-tuning step on the loaded trial). Only the import
differs from a program for Determined.

``python3 extras.py`` (the Trainer API, one slot). In a trial's job it runs itself again
in a child process without the job's variables, in a scratch directory: several
``Trainer.fit`` calls (a resume among them) train off-cluster there, as Determined's local
mode, and leave the trial's own metrics alone. A check that fails raises.
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import sys
import tempfile
from typing import Any

import torch
from torch.utils.data import BatchSampler, SequentialSampler, TensorDataset

import dethpc as det

HOOKS: list[str] = []


def check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(f"determined-compat check failed: {what}")


def data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    return TensorDataset(x, x @ torch.tensor([[1.0], [-2.0]]))


class Hooks(det.pytorch.PyTorchCallback):
    """Records each hook; its state counts the checkpoints it saw."""

    def __init__(self) -> None:
        self.saves = 0

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        HOOKS.append("on_trial_startup")

    def on_trial_shutdown(self) -> None:
        HOOKS.append("on_trial_shutdown")

    def on_training_start(self) -> None:
        HOOKS.append("on_training_start")

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        HOOKS.append("on_training_epoch_start")

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        HOOKS.append("on_training_epoch_end")

    def on_training_workload_end(self, avg_metrics: dict[str, Any],
                                 batch_metrics: list[dict[str, Any]]) -> None:
        check("loss" in avg_metrics and len(batch_metrics) >= 1, "workload metrics")
        HOOKS.append("on_training_workload_end")

    def on_validation_start(self) -> None:
        HOOKS.append("on_validation_start")

    def on_validation_epoch_start(self) -> None:
        HOOKS.append("on_validation_epoch_start")

    def on_validation_epoch_end(self, outputs: list[Any]) -> None:
        HOOKS.append("on_validation_epoch_end")

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        check("val_loss" in metrics, f"validation metrics {metrics}")
        HOOKS.append("on_validation_end")

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        check("models_state_dict" in checkpoint, "Determined's checkpoint keys")
        HOOKS.append("on_checkpoint_load_start")

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        HOOKS.append("on_checkpoint_save_start")

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        HOOKS.append("on_checkpoint_end")

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        check(os.path.isdir(checkpoint_dir), "the checkpoint's directory")
        HOOKS.append("on_checkpoint_write_end")

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        HOOKS.append("on_checkpoint_upload_end")
        self.uuid = uuid

    def state_dict(self) -> dict[str, Any]:
        self.saves += 1
        return {"saves": self.saves}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        HOOKS.append("load_state_dict")
        self.saves = state_dict["saves"]


class SumCount(det.pytorch.MetricReducer):
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total, self.count = 0.0, 0

    def update(self, value: float) -> None:
        self.total, self.count = self.total + value, self.count + 1

    def per_slot_reduce(self) -> Any:
        return self.total, self.count

    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        return {"err_mean": sum(t for t, _ in per_slot_metrics)
                / max(1, sum(c for _, c in per_slot_metrics))}


class Base(det.pytorch.PyTorchTrial):
    def __init__(self, context: det.pytorch.PyTorchTrialContext) -> None:
        self.context = context
        torch.manual_seed(1)
        self.model = context.wrap_model(torch.nn.Linear(2, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))
        self.errs = context.wrap_reducer(SumCount(), for_training=False)
        self.worst = context.wrap_reducer(max, name="worst", for_training=False)
        self.hooks = Hooks()

    def build_callbacks(self) -> dict[str, det.pytorch.PyTorchCallback]:
        return {"hooks": self.hooks}

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def build_training_data_loader(self) -> det.pytorch.DataLoader:
        return det.pytorch.DataLoader(data(16, 1), batch_size=4)

    def build_validation_data_loader(self) -> det.pytorch.DataLoader:
        return det.pytorch.DataLoader(data(8, 2), batch_size=4)


class ExtrasTrial(Base):
    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        err = (self.model(x) - y).abs()
        self.errs.update(float(err.sum()) / len(err))
        self.worst.update(float(err.max()))
        return {"val_loss": float((err ** 2).mean())}


class FullAmpTrial(Base):
    """evaluate_full_dataset instead of evaluate_batch, under automatic AMP (CUDA AMP, as
    Determined's: off on a CPU, where the numbers are full precision)."""

    def __init__(self, context: det.pytorch.PyTorchTrialContext) -> None:
        context.experimental.use_amp()
        super().__init__(context)
        self.plain = context.autocast_forward_pass(torch.nn.Linear(2, 1))

    def build_callbacks(self) -> dict[str, det.pytorch.PyTorchCallback]:
        return {}

    def evaluate_full_dataset(self, data_loader: torch.utils.data.DataLoader
                              ) -> dict[str, Any]:
        errs = torch.cat([(self.model(x) - y).abs() for x, y in data_loader])
        check(len(errs) == 8, "the whole validation set")
        self.worst.update(float(errs.max()))
        self.errs.update(float(errs.mean()))
        self.plain(errs[:1].repeat(1, 2))
        return {"val_loss": float((errs ** 2).mean()), "val_n": float(len(errs))}


def train(cls: type, batches: int, latest: str | None = None) -> Any:
    with det.pytorch.init(hparams={"global_batch_size": 4}) as context:
        trial = cls(context)
        det.pytorch.Trainer(trial, context).fit(
            max_length=det.pytorch.Batch(batches), latest_checkpoint=latest,
            validation_period=det.pytorch.Batch(4), checkpoint_period=det.pytorch.Batch(4))
        return trial


def check_samplers() -> dict[str, Any]:
    """Determined's samplers' batches (the values Determined 0.38.1 gives)."""
    s = det.pytorch.samplers
    seq = SequentialSampler(range(10))
    batches = BatchSampler(seq, 3, drop_last=False)
    chain = det.pytorch.adapt_batch_sampler(batches, repeat=True, skip=2, num_replicas=3,
                                            rank=1)
    check(list(itertools.islice(iter(chain), 4)) == [[9], [6, 7, 8], [3, 4, 5], [0, 1, 2]],
          "adapt chain")
    check(len(chain) == 1, "the chain's length")
    shard = s.DistributedBatchSampler(batches, 3, 0)
    check((len(shard), list(shard)) == (2, [[0, 1, 2], [9]]), "batch shard")
    check(list(s.DistributedSampler(seq, 3, 1)) == [1, 4, 7], "sample shard")
    check(len(s.DistributedSampler(seq, 3, 1)) == 3, "sample shard length")
    shuffled = s.ReproducibleShuffleSampler(seq, 7)
    first, second = list(shuffled), list(shuffled)
    check(sorted(first) == list(range(10)) and first != second and len(shuffled) == 10,
          "a seeded shuffle, another order each pass")
    bshuffled = s.ReproducibleShuffleBatchSampler(batches, 7)
    check(sorted(map(tuple, bshuffled)) == sorted(map(tuple, batches)), "batch shuffle")
    check(len(bshuffled) == 4, "batch shuffle length")
    check(list(s.SkipSampler(seq, 8)) == [8, 9] and len(s.SkipSampler(seq, 8)) == 10, "skip")
    skip = s.SkipBatchSampler(batches, 3)
    check((list(skip), len(skip)) == ([[9]], 4), "skip batches")
    check(list(itertools.islice(s.RepeatSampler(seq), 12))[10:] == [0, 1], "repeat")
    check(len(s.RepeatSampler(seq)) == 10, "repeat length")
    rep = s.RepeatBatchSampler(batches)
    check(list(itertools.islice(rep, 5))[4] == [0, 1, 2] and len(rep) == 4, "repeat batches")
    return {"shuffled": first}


def fine_tune(path: str) -> None:
    """The trial back from its checkpoint on a CheckpointLoadContext, and one more step
    through that context (what an inference or fine-tuning script does)."""
    trial = det.pytorch.load_trial_from_checkpoint_path(path)
    ctx = trial.context
    check(isinstance(ctx, det.pytorch.CheckpointLoadContext), "the load context")
    check(ctx.get_hparams() == {"global_batch_size": 4} and ctx.get_hparam(
        "global_batch_size") == 4, "the checkpoint's hparams")
    check(ctx.get_per_slot_batch_size() == 4 and ctx.get_global_batch_size() == 4, "sizes")
    check(isinstance(ctx.get_experiment_config(), dict), "config")
    check(ctx.get_data_config() == {}, "data config")
    check((ctx.get_trial_id(), ctx.get_experiment_id(), ctx.get_trial_seed()) == (0, 0, 0),
          "ids off a cluster")
    check(ctx.get_initial_batch() == 0, "no batch trained before")
    for position in (ctx.current_train_batch, ctx.current_train_epoch, ctx.is_epoch_start,
                     ctx.is_epoch_end):
        refused = False
        try:                      # as Determined's: no position before training
            position()
        except Exception:  # noqa: BLE001 - the refusal's class is the package's own
            refused = True
        check(refused, f"{position.__name__}() refuses before training")
    ctx.set_stop_requested(False)
    check(not ctx.get_stop_requested(), "stop flag")
    ctx.set_enable_tensorboard_logging(False)
    check(not ctx.get_enable_tensorboard_logging(), "tensorboard flag")
    ctx.set_profiler()            # as Determined's: context.profiler is a torch profiler
    check(ctx.get_tensorboard_path() is not None, "a tensorboard path")
    with torch.no_grad():
        before = trial.model.weight.clone()
    sched = ctx.wrap_lr_scheduler(torch.optim.lr_scheduler.StepLR(trial.opt, 1),
                                  det.pytorch.LRScheduler.StepMode.MANUAL_STEP)
    x, y = ctx.to_device(data(4, 3)[:])
    loss = torch.nn.functional.mse_loss(trial.model(x), y)
    ctx.backward(loss)
    ctx.step_optimizer(trial.opt)
    sched.step()
    check(not torch.equal(before, trial.model.weight), "a fine-tuning step")
    check(len(ctx.models) == 1 and len(ctx.optimizers) == 1 and len(ctx.lr_schedulers) == 1
          and ctx.profiler is not None and ctx.distributed.size == 1 and ctx.device is not None
          and ctx.experimental is not None, "what the context holds")
    ctx.reset_reducers()
    check(ctx.reduce_metrics(for_training=True) == {}, "no training reducers")
    total = ctx.wrap_reducer(lambda values: sum(values), name="total")
    total.update(2.0)
    # the cross-slot step by hand, two "slots" (of the reducer wrapped here only: the
    # trial's own have no values on a loaded context)
    wrapped = [w for w in ctx._wrapped_reducers if w.name == "total"]
    mine = [w.reducer.per_slot_reduce() for w in wrapped]
    check(ctx.run_cross_slot_reduction(wrapped, [mine, mine]) == {"total": 4.0},
          "run_cross_slot_reduction")
    check(type(trial).trial_context_class is det.pytorch.PyTorchTrialContext
          and type(trial).trial_controller_class is None, "the trial's harness classes")
    other = det.pytorch.CheckpointLoadContext({"global_batch_size": 4})
    other.wrap_scaler(torch.amp.GradScaler("cpu", enabled=False))
    plain = other.autocast_forward_pass(other.wrap_model(torch.nn.Linear(2, 1)))
    check(plain(x).shape == (4, 1), "autocast on a loaded context")
    try:
        ctx.get_tensorboard_writer()
    except det.errors.DethpcError:  # without the tensorboard package
        pass


def in_a_child() -> None:
    """This script off-cluster: a child without Slurm's, dethpc's and Determined's
    variables, in a scratch directory (its checkpoints go there)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "DETHPC_", "DET_", "RANK", "WORLD_SIZE", "LOCAL_",
                                "GROUP_", "CROSS_", "MASTER_", "PMI", "OMPI"))}
    env.update({k: os.environ[k] for k in ("DETHPC_SURFACE_TRACE",) if k in os.environ})
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env,
                              cwd=scratch, capture_output=True, text=True, timeout=600)
    check(done.returncode == 0, f"off-cluster run: exit {done.returncode}\n{done.stderr}")


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    if det.get_cluster_info() is not None:
        in_a_child()
        with det.core.init() as core_context:  # the trial's own result: the checks passed
            core_context.train.report_validation_metrics(steps_completed=1,
                                                         metrics={"val_loss": 0.0})
        return
    trial = train(ExtrasTrial, 8)
    first = list(HOOKS)
    check(first[0] == "on_trial_startup" and first[-1] == "on_trial_shutdown", str(first))
    check({"on_training_epoch_end", "on_validation_end", "on_checkpoint_upload_end",
           "on_training_workload_end"} <= set(first), str(first))
    latest = trial.hooks.uuid
    HOOKS.clear()
    resumed = train(ExtrasTrial, 12, latest=latest)
    check(HOOKS.index("on_checkpoint_load_start") < HOOKS.index("load_state_dict")
          < HOOKS.index("on_training_start"), str(HOOKS))
    check(resumed.hooks.saves > trial.hooks.saves, "the callback's state came back")
    full = train(FullAmpTrial, 4)
    check(full.context.scaler is not None, "use_amp wraps a scaler")
    check_samplers()
    with trial.context.core.checkpoint.restore_path(latest) as path:
        fine_tune(str(path))


if __name__ == "__main__":
    main()
