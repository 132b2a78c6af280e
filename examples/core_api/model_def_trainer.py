"""The PyTorch Trainer: a ``PyTorchTrial`` trained by ``det.pytorch.Trainer``
inside ``det.pytorch.init()``, as Determined 0.38's Trainer API documents it;
only the import differs. Checkpoints, validation, resume and preemption come
from the Trainer.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import dethpc as det


def _data(n: int, seed: int) -> TensorDataset:
    x = torch.randn(n, 1, generator=torch.Generator().manual_seed(seed))
    return TensorDataset(x, 2 * x - 1)


class LineTrial(det.pytorch.PyTorchTrial):
    def __init__(self, context: det.pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(torch.nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("learning_rate")))

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(_data(640, 0), batch_size=self.context.get_per_slot_batch_size(),
                          shuffle=True, drop_last=True)

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(_data(128, 1), batch_size=self.context.get_per_slot_batch_size())

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        return {"val_loss": torch.nn.functional.mse_loss(self.model(x), y)}


def main() -> None:
    with det.pytorch.init() as train_context:
        trial = LineTrial(train_context)
        trainer = det.pytorch.Trainer(trial, train_context)
        trainer.fit(max_length=det.pytorch.Batch(40), checkpoint_period=det.pytorch.Batch(20),
                    validation_period=det.pytorch.Batch(20))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    main()
