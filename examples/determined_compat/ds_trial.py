"""A ``DeepSpeedTrial`` that calls Determined's DeepSpeed Trial API and checks what it gets:
``wrap_model_engine``, ``set_mpu`` with ``make_data_parallel_mpu``, ``make_deepspeed_mpu``,
the micro-batch getters (and their deprecated properties), every context getter, the
reducers, ``overwrite_deepspeed_config``, ``save``/``load`` (the engines' checkpoints).
Written as for Determined 0.38; only the import differs. CPU DeepSpeed (fp32, ZeRO 1).

* ``python3 -m determined.launch.deepspeed --trial ds_trial:CompatDeepSpeedTrial``
  (``ds_trial.yaml``, 2 slots);
* ``python3 ds_trial.py``: the Trainer API (``det.pytorch.deepspeed.init()``,
  ``Trainer.fit``) with ``FullDatasetTrial`` (``evaluate_full_dataset``), which then loads
  its last checkpoint back through the trial's ``load``.
"""

from __future__ import annotations

import logging
import os
import warnings
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed picks its accelerator

import deepspeed  # noqa: E402
import torch  # noqa: E402

import dethpc as det  # noqa: E402
from dethpc.pytorch import deepspeed as det_ds  # noqa: E402


def check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(f"determined-compat check failed: {what}")


def data(n: int = 32) -> torch.utils.data.TensorDataset:
    x = torch.linspace(-1, 1, n).unsqueeze(1)
    return torch.utils.data.TensorDataset(x, 2 * x - 1)


class CompatDeepSpeedTrial(det_ds.DeepSpeedTrial):
    def __init__(self, context: det_ds.DeepSpeedTrialContext) -> None:
        self.context = context
        hp = context.get_hparams()
        check(context.get_hparam("lr") == hp["lr"], "get_hparam")
        config = det_ds.overwrite_deepspeed_config(
            {"train_micro_batch_size_per_gpu": 1, "zero_allow_untested_optimizer": True,
             "optimizer": {"type": "SGD", "params": {"lr": 1.0}},
             "zero_optimization": {"stage": 1}},
            {"train_micro_batch_size_per_gpu": context.get_per_slot_batch_size(),
             "optimizer": {"params": {"lr": hp["lr"]}}})
        check(config["optimizer"] == {"type": "SGD", "params": {"lr": hp["lr"]}},
              f"overwrite_deepspeed_config: {config}")
        torch.manual_seed(context.get_trial_seed())
        model = torch.nn.Linear(1, 1)
        engine, _, _, _ = deepspeed.initialize(model=model,
                                               model_parameters=model.parameters(),
                                               config=config)
        self.engine = context.wrap_model_engine(engine)
        check(context.models == [self.engine], "models")
        dist = context.distributed
        mpu = det_ds.make_data_parallel_mpu(dist)
        check(isinstance(mpu, det_ds.ModelParallelUnit)
              and (mpu.data_parallel_rank, mpu.data_parallel_world_size) ==
              (dist.get_rank(), dist.get_size())
              and mpu.should_report_metrics and mpu.should_build_data_loader,
              f"make_data_parallel_mpu: {mpu}")
        context.set_mpu(mpu)
        grid = SimpleNamespace(get_pipe_parallel_rank=lambda: 1,
                               get_pipe_parallel_world_size=lambda: 3,
                               get_slice_parallel_rank=lambda: 0,
                               get_data_parallel_rank=lambda: 0,
                               get_data_parallel_world_size=lambda: 1)
        check(not det_ds.make_deepspeed_mpu(grid).should_build_data_loader,
              "make_deepspeed_mpu: a middle pipeline stage builds no loader")
        check(context.get_train_micro_batch_size_per_gpu() == context.get_per_slot_batch_size()
              and context.get_num_micro_batches_per_slot() == 1, "micro batches")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check(context.train_micro_batch_size_per_gpu ==
                  context.get_train_micro_batch_size_per_gpu()
                  and context.num_micro_batches_per_slot == 1, "deprecated properties")
        check(len(caught) == 2 and all(w.category is FutureWarning for w in caught),
              "the deprecated properties warn (FutureWarning)")
        check(not context.use_pipeline_parallel, "use_pipeline_parallel")
        check(context.get_global_batch_size() == hp["global_batch_size"], "global batch")
        check(context.get_data_config() == context.get_experiment_config().get("data", {}),
              "get_data_config")
        check(context.get_trial_id() >= 1 and context.get_experiment_id() >= 1, "ids")
        check(context.get_initial_batch() == 0 or context.get_initial_batch() > 0, "initial")
        check(context.get_stop_requested() is False, "get_stop_requested")
        context.set_stop_requested(False)
        context.set_profiler()          # as Determined's: a torch profiler, stepped per batch
        check(context.profiler is not None, "profiler")
        context.set_enable_tensorboard_logging(True)
        check(context.get_enable_tensorboard_logging(), "tensorboard logging")
        check(context.get_tensorboard_path().name == "tensorboard", "get_tensorboard_path")
        context.get_tensorboard_writer()
        context.disable_dataset_reproducibility_checks()
        context.disable_auto_grad_accumulation()
        self.count = context.wrap_reducer(lambda parts: sum(parts), name="val_count")
        check(type(self).trial_context_class is det_ds.DeepSpeedTrialContext
              and type(self).trial_controller_class is None, "the trial's harness classes")

    def build_training_data_loader(self) -> Any:
        return det.pytorch.DataLoader(data(), batch_size=self.context.get_per_slot_batch_size(),
                                      shuffle=True)

    def build_validation_data_loader(self) -> Any:
        return det.pytorch.DataLoader(data(8), batch_size=4)

    def build_callbacks(self) -> dict[str, det.pytorch.PyTorchCallback]:
        return {}

    def train_batch(self, dataloader_iter: Any, epoch_idx: int, batch_idx: int) -> Any:
        ctx = self.context
        check(ctx.current_train_batch() == batch_idx and ctx.current_train_epoch() == epoch_idx,
              "current_train_batch/epoch")
        ctx.is_epoch_start()
        ctx.is_epoch_end()
        x, y = ctx.to_device(next(dataloader_iter))
        check(self.get_batch_length((x, y)) == len(x), "get_batch_length")
        loss = torch.nn.functional.mse_loss(self.engine(x), y)
        self.engine.backward(loss)
        self.engine.step()
        return {"loss": loss}

    def evaluate_batch(self, dataloader_iter: Any, batch_idx: int) -> dict[str, Any]:
        x, y = next(dataloader_iter)
        self.count.update(len(x))
        if batch_idx == 0:                   # the cross-slot step by hand, one "slot"
            wrapped = [w for w in self.context._wrapped_reducers if w.name == "val_count"]
            got = self.context.run_cross_slot_reduction(
                wrapped, [[w.reducer.per_slot_reduce() for w in wrapped]])
            check(got == {"val_count": len(x)}, "run_cross_slot_reduction")
        return {"val_loss": torch.nn.functional.mse_loss(self.engine(x), y)}

    def evaluation_reducer(self) -> det.pytorch.Reducer:
        return det.pytorch.Reducer.AVG


class FullDatasetTrial(CompatDeepSpeedTrial):
    evaluate_batch = det_ds.DeepSpeedTrial.evaluate_batch  # type: ignore[assignment]

    def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
        losses = [torch.nn.functional.mse_loss(self.engine(x), y) for x, y in data_loader]
        self.context.reset_reducers()
        reduced = self.context.reduce_metrics(for_training=False)
        check(set(reduced) == {"val_count"}, f"reduce_metrics: {reduced}")
        return {"val_loss": torch.stack(losses).mean()}


def main() -> None:
    hparams = {"global_batch_size": 4, "lr": 0.1}
    with det_ds.init(hparams=hparams) as context:
        trial = FullDatasetTrial(context)
        trainer = det_ds.Trainer(trial, context)
        trainer.fit(max_length=det.pytorch.Batch(4), validation_period=det.pytorch.Batch(2))
        before = [p.detach().clone() for p in trial.engine.module.parameters()]
        latest = trainer._last_uuid
        check(latest is not None, "the Trainer checkpointed")
        with context.core.checkpoint.restore_path(latest) as path:
            trial.load(context, path)
        after = list(trial.engine.module.parameters())
        check(all(torch.equal(a, b) for a, b in zip(before, after, strict=True)),
              "load() restores the engine's weights")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    main()
