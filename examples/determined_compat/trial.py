"""A ``PyTorchTrial`` that calls the rest of Determined's PyTorch API and checks what it
gets: every ``PyTorchTrialContext`` getter and wrapper, ``det.pytorch.DataLoader`` and its
fields, ``LRScheduler`` with its step modes, the training units, the helpers
(``to_device``, ``data_length``, ``overwrite_deepspeed_config``), reducers and the
experimental context. Written as for Determined 0.38; only the import differs.

Three ways to run it, as Determined's users do:

* ``python3 trial.py``: the Trainer API (``det.pytorch.init()``, ``Trainer.fit``);
* ``python3 -m determined.launch.torch_distributed --trial trial:CompatTrial``;
* ``python3 -m determined.launch.deepspeed --trial trial:CompatTrial``.

A check that fails raises and fails the trial with what Determined would have given;
the chief writes what it saw to ``compat-trial.json`` in the trial's TensorBoard
directory (``get_tensorboard_path()``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import torch
from torch.utils.data import Dataset

import dethpc as det

#: the batches the searcher (or ``fit``) trains
LENGTH = 8


def check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(f"determined-compat check failed: {what}")


class Line(Dataset):
    """y = 2x - 1 on a fixed grid (deterministic, no download)."""

    def __init__(self, n: int) -> None:
        self.x = torch.linspace(-1, 1, n).unsqueeze(1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "y": 2 * self.x[i] - 1}


def seed_worker(_worker_id: int) -> None:
    """A worker_init_fn (Determined passes it to torch)."""


def describe_loader(loader: det.pytorch.DataLoader, per_slot: int) -> dict[str, Any]:
    """Determined's DataLoader keeps torch's arguments as its fields (on dethpc it is
    torch's DataLoader: the sampler and batch sampler are torch's for ``shuffle=True``)."""
    fields = {"batch_size": loader.batch_size, "drop_last": loader.drop_last,
              "num_workers": loader.num_workers, "pin_memory": loader.pin_memory,
              "timeout": loader.timeout, "persistent_workers": loader.persistent_workers,
              "prefetch_factor": loader.prefetch_factor,
              "multiprocessing_context": loader.multiprocessing_context}
    check(fields["batch_size"] == per_slot, f"DataLoader.batch_size {fields}")
    check(loader.worker_init_fn is seed_worker and callable(loader.collate_fn)
          and isinstance(loader.sampler, torch.utils.data.RandomSampler)
          and loader.batch_sampler.batch_size == per_slot
          and loader.generator is None and isinstance(loader.dataset, Line),
          "DataLoader keeps worker_init_fn, dataset, the sampler of shuffle=True")
    torch_loader = loader.get_data_loader()
    check(isinstance(torch_loader, torch.utils.data.DataLoader), "get_data_loader(): torch's")
    check(len(loader) == len(loader.dataset) // per_slot, f"len(DataLoader) {len(loader)}")
    first = next(iter(loader))
    check(det.pytorch.data_length(first["x"]) == per_slot, "data_length of a batch")
    return fields


class CompatTrial(det.pytorch.PyTorchTrial):
    def __init__(self, context: det.pytorch.PyTorchTrialContext) -> None:
        self.context = context
        hp = context.get_hparams()
        check(context.get_hparam("lr") == hp["lr"], "get_hparam agrees with get_hparams")
        check(context.get_global_batch_size() == hp["global_batch_size"],
              "get_global_batch_size")
        check(context.get_per_slot_batch_size() * context.distributed.size
              == context.get_global_batch_size(), "per-slot x slots = global batch size")
        check(context.get_data_config() == {"points": 64},
              f"get_data_config(): data:, got {context.get_data_config()}")
        config = context.get_experiment_config()
        check(config["data"] == context.get_data_config(), "get_experiment_config()['data']")
        check(context.get_trial_id() > 0 and context.get_experiment_id() > 0, "ids")
        check(isinstance(context.get_trial_seed(), int), "get_trial_seed")
        check(context.get_initial_batch() == 0, "get_initial_batch() on a fresh trial")
        check(context.device == torch.device("cpu"), f"device {context.device}")
        context.experimental.disable_dataset_reproducibility_checks()
        context.set_enable_tensorboard_logging(True)
        check(context.get_enable_tensorboard_logging() is True, "tensorboard logging flag")
        # as Determined's docs: torch.profiler.profile's own arguments (a short schedule;
        # the Trainer steps it around each train_batch)
        context.set_profiler(activities=[torch.profiler.ProfilerActivity.CPU],
                             schedule=torch.profiler.schedule(wait=1, warmup=1, active=1,
                                                              repeat=1))
        check(context.profiler is not None, "a torch profiler")
        check(context.get_tensorboard_path().is_dir(), "get_tensorboard_path() is made")
        self.writer = context.get_tensorboard_writer()
        # Determined wants the scaler before the model
        self.scaler = context.wrap_scaler(torch.amp.GradScaler("cpu", enabled=False))
        self.model = context.wrap_model(torch.nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=hp["lr"]))
        sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=4, gamma=0.5)
        self.sched = context.wrap_lr_scheduler(
            sched, det.pytorch.LRScheduler.StepMode.STEP_EVERY_BATCH)
        self.sched.load_state_dict(self.sched.state_dict())
        # Determined's older form: an LRScheduler object carrying its step mode
        aside = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        self.legacy = det.pytorch.LRScheduler(
            torch.optim.lr_scheduler.StepLR(aside, step_size=1, gamma=0.5),
            step_mode=det.pytorch.LRScheduler.StepMode.MANUAL_STEP)
        context.wrap_lr_scheduler(self.legacy, det.pytorch.LRScheduler.StepMode.MANUAL_STEP)
        check(context.models == [self.model] and context.optimizers == [self.opt],
              "models and optimizers: the wrapped ones")
        check(len(context.lr_schedulers) == 2, "lr_schedulers: the wrapped two")
        self.modes = [m.name for m in (det.pytorch.LRScheduler.StepMode.MANUAL_STEP,
                                       det.pytorch.LRScheduler.StepMode.STEP_EVERY_EPOCH,
                                       det.pytorch.LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP)]
        self.seen: dict[str, Any] = {}

    def build_training_data_loader(self) -> det.pytorch.DataLoader:
        per_slot = self.context.get_per_slot_batch_size()
        loader = det.pytorch.DataLoader(Line(64), batch_size=per_slot, shuffle=True,
                                        drop_last=True, worker_init_fn=seed_worker)
        self.seen["loader"] = describe_loader(loader, per_slot)
        return loader

    def build_validation_data_loader(self) -> det.pytorch.DataLoader:
        return det.pytorch.DataLoader(Line(16), batch_size=self.context.get_per_slot_batch_size())

    def build_callbacks(self) -> dict[str, Any]:
        return {}

    def evaluation_reducer(self) -> det.pytorch.Reducer:
        return det.pytorch.Reducer.AVG

    def get_batch_length(self, batch: Any) -> int:
        return det.pytorch.data_length(batch["x"])

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        check(batch_idx == self.context.current_train_batch(), "current_train_batch")
        check(epoch_idx == self.context.current_train_epoch(), "current_train_epoch")
        if self.context.is_epoch_start():
            self.seen.setdefault("epoch_starts", []).append(batch_idx)
        if self.context.is_epoch_end():
            self.seen.setdefault("epoch_ends", []).append(batch_idx)
        batch = self.context.to_device(batch)
        check(self.get_batch_length(batch) == self.context.get_per_slot_batch_size(),
              "get_batch_length of a training batch")
        loss = torch.nn.functional.mse_loss(self.model(batch["x"]), batch["y"])
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        self.writer.add_scalar("compat_loss", loss.item(), batch_idx)
        self.seen["lr"] = self.sched.get_last_lr()
        if batch_idx == 0:
            check(self.context.get_stop_requested() is False, "no stop asked")
            self.context.set_stop_requested(False)
        if batch_idx == LENGTH - 1 and self.context.distributed.rank == 0:
            self.report()
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        batch = det.pytorch.to_device(batch, self.context.device)
        return {"val_loss": torch.nn.functional.mse_loss(self.model(batch["x"]), batch["y"])}

    def report(self) -> None:
        units = {"batch": (det.pytorch.Batch(4).value, det.pytorch.Batch(4).should_stop(4)),
                 "epoch": (det.pytorch.Epoch(2).value, det.pytorch.Epoch(2).should_stop(1))}
        check(units == {"batch": (4, True), "epoch": (2, False)}, f"units {units}")
        check(det.pytorch.TrainUnit.should_stop(det.pytorch.Batch(1), 1), "TrainUnit")
        ds = det.pytorch.deepspeed.overwrite_deepspeed_config(
            {"train_batch_size": 8, "optimizer": {"type": "Adam"}},
            {"optimizer": {"params": {"lr": 0.1}}})
        check(ds == {"train_batch_size": 8, "optimizer": {"type": "Adam",
                                                           "params": {"lr": 0.1}}},
              f"overwrite_deepspeed_config {ds}")
        data: det.pytorch.TorchData = {"x": torch.zeros(3)}
        reducers = [r.name for r in (det.pytorch.Reducer.AVG, det.pytorch.Reducer.SUM,
                                     det.pytorch.Reducer.MAX, det.pytorch.Reducer.MIN)]
        self.context.experimental.disable_auto_to_device()
        # MANUAL_STEP: the Trainer never steps it; the trial does
        check(self.legacy.get_last_lr() == [1.0], f"manual scheduler untouched: "
              f"{self.legacy.get_last_lr()}")
        self.legacy.step()
        state = self.legacy.state_dict()
        self.legacy.load_state_dict(state)
        check(self.legacy.get_last_lr() == [0.5], "LRScheduler.step() by the trial")
        self.seen.update({"units": units, "reducers": reducers, "modes": self.modes,
                          "data_length": det.pytorch.data_length(data["x"])})
        out = self.context.get_tensorboard_path() / "compat-trial.json"
        out.write_text(json.dumps(self.seen))


def main() -> None:
    with det.pytorch.init() as context:
        trial = CompatTrial(context)
        trainer = det.pytorch.Trainer(trial, context)
        trainer.configure_profiler(enabled=False)
        trainer.fit(max_length=det.pytorch.Batch(LENGTH),
                    validation_period=det.pytorch.Batch(4))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    main()
