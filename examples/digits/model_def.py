"""DigitsTrial: a small MLP on scikit-learn's 8x8 digits (digits.npz: no download, CPU).

Hyperparameters: lr, hidden_size, dropout, optimizer (sgd|adam), global_batch_size.
Reports training ``loss``/``train_accuracy`` and validation ``validation_loss``
(the searcher metric, smaller is better) and ``accuracy``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dethpc.pytorch import PyTorchTrial, PyTorchTrialContext

#: 1797 images: the first 1437 of a fixed permutation train, the other 360 validate
_SPLIT_SEED = 0
_N_TRAIN = 1437


#: scikit-learn's 8x8 digits (``sklearn.datasets.load_digits``, in its order: pixels
#: 0-16 as uint8, labels 0-9), saved beside this file: importing scikit-learn (and scipy)
#: to read 1797 rows cost each trial 2.4 s of CPU on 2 loaded cores, a quarter of a short
#: trial's whole CPU time (README.md)
DATA = Path(__file__).resolve().parent / "digits.npz"


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    with np.load(DATA) as f:
        return f["images"].astype(np.float64), f["labels"].astype(np.int64)


def digits_datasets() -> tuple[TensorDataset, TensorDataset]:
    x, y = load_digits()
    order = np.random.RandomState(_SPLIT_SEED).permutation(len(x))
    xt = torch.tensor(x[order] / 16.0, dtype=torch.float32)
    yt = torch.tensor(y[order], dtype=torch.long)
    return (TensorDataset(xt[:_N_TRAIN], yt[:_N_TRAIN]),
            TensorDataset(xt[_N_TRAIN:], yt[_N_TRAIN:]))


class DigitsTrial(PyTorchTrial):
    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        # A model this small is fastest on one thread, and several trials then share
        # a node without oversubscribing its cores.
        torch.set_num_threads(int(os.environ.get("DIGITS_THREADS", "1")))
        hidden = int(context.get_hparam("hidden_size"))
        model = nn.Sequential(
            nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(float(context.get_hparam("dropout"))),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10),
        )
        self.model = context.wrap_model(model)
        lr = float(context.get_hparam("lr"))
        name = context.get_hparam("optimizer")
        if name == "adam":
            optimizer: torch.optim.Optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        elif name == "sgd":
            optimizer = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        else:
            raise ValueError(f"optimizer must be sgd or adam, got {name!r}")
        self.optimizer = context.wrap_optimizer(optimizer)
        self.loss_fn = nn.CrossEntropyLoss()
        self.train_set, self.val_set = digits_datasets()

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.context.get_per_slot_batch_size(),
                          shuffle=True, drop_last=True)

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=120)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        logits = self.model(x)
        loss = self.loss_fn(logits, y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        acc = (logits.argmax(dim=1) == y).float().mean()
        return {"loss": loss.item(), "train_accuracy": acc.item()}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        logits = self.model(x)
        return {"validation_loss": self.loss_fn(logits, y).item(),
                "accuracy": (logits.argmax(dim=1) == y).float().mean().item()}
