"""Record real learning curves for the ASHA benchmark.

Owns: training N small torch models with random hyperparameters for
``max_length`` batches each, recording the validation loss every ``every``
batches together with the measured wall-clock seconds of training and of one
validation pass. Two independent curve sets (``--set``):

* ``digits``: MLPs on scikit-learn's digits (8x8 images, 10 classes) ->
  ``bench/asha/curves.json``;
* ``cancer``: small feature-tokenizer transformers (each of the 30 features is a
  token; self-attention, then a classifier on the mean token) on scikit-learn's
  bundled breast-cancer table (569 rows, 2 classes) -> ``bench/asha/curves_cancer.json``.

Must not: be imported by dethpc (bench-only code).

Run: ``python bench/asha/curves.py --trials 160 --max-length 256 --every 4`` (digits),
``python bench/asha/curves.py --set cancer --trials 48 --max-length 512 --every 8``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.model_selection import train_test_split
from torch import nn


def sample_hparams(rng: random.Random) -> dict[str, Any]:
    return {
        "lr": 10 ** rng.uniform(-4.0, 0.0),
        "hidden": rng.choice([16, 32, 64, 128, 256, 512]),
        "layers": rng.randint(1, 3),
        "batch_size": rng.choice([16, 32, 64, 128]),
        "optimizer": rng.choice(["sgd", "adam"]),
        "dropout": rng.uniform(0.0, 0.5),
        "weight_decay": 10 ** rng.uniform(-6.0, -2.0),
    }


def sample_cancer(rng: random.Random) -> dict[str, Any]:
    return {
        "lr": 10 ** rng.uniform(-4.5, -0.5),
        "d_model": rng.choice([16, 32, 64]),
        "heads": rng.choice([1, 2, 4]),
        "layers": rng.randint(1, 3),
        "batch_size": rng.choice([16, 32, 64, 128]),
        "optimizer": rng.choice(["sgd", "adam"]),
        "dropout": rng.uniform(0.0, 0.5),
        "weight_decay": 10 ** rng.uniform(-6.0, -2.0),
    }


class TabTransformer(nn.Module):
    """Each feature becomes a token (value x learned vector + feature embedding)."""

    def __init__(self, hp: dict[str, Any], features: int, classes: int) -> None:
        super().__init__()
        d = hp["d_model"]
        self.scale = nn.Parameter(torch.randn(features, d) * 0.1)
        self.embed = nn.Parameter(torch.randn(features, d) * 0.1)
        layer = nn.TransformerEncoderLayer(d, hp["heads"], dim_feedforward=2 * d,
                                           dropout=hp["dropout"], batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, hp["layers"], enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.unsqueeze(-1) * self.scale + self.embed
        return self.head(self.encoder(tokens).mean(dim=1))


def build(hp: dict[str, Any]) -> nn.Module:
    if "d_model" in hp:
        return TabTransformer(hp, 30, 2)
    layers: list[nn.Module] = []
    width = 64
    for _ in range(hp["layers"]):
        layers += [nn.Linear(width, hp["hidden"]), nn.ReLU(), nn.Dropout(hp["dropout"])]
        width = hp["hidden"]
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        loss = float(nn.functional.cross_entropy(model(x), y))
    model.train()
    return loss if math.isfinite(loss) else 1e3


def train_curve(hp: dict[str, Any], data: tuple[torch.Tensor, ...], max_length: int,
                every: int, seed: int) -> dict[str, Any]:
    xtr, ytr, xva, yva = data
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = build(hp)
    opt_cls = torch.optim.Adam if hp["optimizer"] == "adam" else torch.optim.SGD
    opt = opt_cls(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
    lengths, losses, train_s, val_s = [], [], [], []
    spent = 0.0
    perm = torch.randperm(len(xtr), generator=gen)
    pos = 0
    for batch in range(1, max_length + 1):
        t0 = time.perf_counter()
        if pos + hp["batch_size"] > len(xtr):
            perm, pos = torch.randperm(len(xtr), generator=gen), 0
        idx = perm[pos:pos + hp["batch_size"]]
        pos += hp["batch_size"]
        loss = nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        spent += time.perf_counter() - t0
        if batch % every == 0:
            t1 = time.perf_counter()
            losses.append(evaluate(model, xva, yva))
            val_s.append(time.perf_counter() - t1)
            lengths.append(batch)
            train_s.append(spent)
    return {"hparams": hp, "lengths": lengths, "val_loss": losses, "train_seconds": train_s,
            "val_seconds": float(np.median(val_s))}


def load_data(seed: int, which: str = "digits") -> tuple[torch.Tensor, ...]:
    if which == "cancer":
        x, y = load_breast_cancer(return_X_y=True)
        x = ((x - x.mean(axis=0)) / x.std(axis=0)).astype(np.float32)
    else:
        x, y = load_digits(return_X_y=True)
        x = (x / 16.0).astype(np.float32)
    xtr, xva, ytr, yva = train_test_split(x, y, test_size=0.3, random_state=seed, stratify=y)
    return (torch.from_numpy(xtr), torch.from_numpy(ytr).long(),
            torch.from_numpy(xva), torch.from_numpy(yva).long())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=160)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--every", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", choices=["digits", "cancer"], default="digits")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(__file__).with_name(
        "curves.json" if args.set == "digits" else f"curves_{args.set}.json")
    torch.set_num_threads(1)
    rng = random.Random(args.seed)
    data = load_data(args.seed, args.set)
    sample = sample_cancer if args.set == "cancer" else sample_hparams
    curves = []
    for i in range(args.trials):
        curves.append(train_curve(sample(rng), data, args.max_length, args.every,
                                  args.seed * 100003 + i))
        if (i + 1) % 10 == 0:
            print(f"{i + 1}/{args.trials} curves", flush=True)
    dataset = ("sklearn digits (1797 images, 70/30 split), MLPs" if args.set == "digits" else
               "sklearn breast_cancer (569 rows, 30 features, standardized, 70/30 split), "
               "feature-tokenizer transformers")
    meta = {"set": args.set, "dataset": dataset, "unit": "batches",
            "max_length": args.max_length, "every": args.every, "seed": args.seed,
            "torch": torch.__version__, "threads": 1}
    out.write_text(json.dumps({"meta": meta, "curves": curves}))
    print(f"wrote {len(curves)} curves to {out}")


if __name__ == "__main__":
    main()
