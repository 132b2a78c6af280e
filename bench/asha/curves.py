"""Record real learning curves for the ASHA benchmark.

Owns: training N small torch models with random hyperparameters for
``max_length`` batches each, recording the validation loss every ``every``
batches together with the measured wall-clock seconds of training and of one
validation pass. Three curve sets (``--set``):

* ``digits``: MLPs on scikit-learn's digits (8x8 images, 10 classes) ->
  ``bench/asha/curves.json``;
* ``cancer``: small feature-tokenizer transformers (each of the 30 features is a
  token; self-attention, then a classifier on the mean token) on scikit-learn's
  bundled breast-cancer table (569 rows, 2 classes) -> ``bench/asha/curves_cancer.json``;
* ``cnn``: small convolutional nets (1-2 conv layers of 8-64 channels, a dense layer)
  on the digits images as 1x8x8 -> ``bench/asha/curves_cnn.json``. The same data as
  ``digits`` but a model family whose batches cost 2-60 ms instead of ~1 ms, so a whole
  trial is several times the measured job start (the set recorded for issue 16's
  "trial length realistic relative to start cost").

Must not: be imported by dethpc (bench-only code).

Run: ``python bench/asha/curves.py --trials 160 --max-length 256 --every 4`` (digits),
``python bench/asha/curves.py --set cancer --trials 48 --max-length 512 --every 8``,
``python bench/asha/curves.py --set cnn --trials 128 --max-length 2048 --every 32 --jobs 2``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
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


def sample_cnn(rng: random.Random) -> dict[str, Any]:
    return {
        "lr": 10 ** rng.uniform(-4.0, -0.5),
        "channels": rng.choice([8, 16, 32, 64]),
        "conv_layers": rng.randint(1, 2),
        "dense": rng.choice([32, 64, 128, 256]),
        "batch_size": rng.choice([16, 32, 64, 128]),
        "optimizer": rng.choice(["sgd", "adam"]),
        "dropout": rng.uniform(0.0, 0.5),
        "weight_decay": 10 ** rng.uniform(-6.0, -2.0),
    }


SAMPLERS = {"digits": sample_hparams, "cancer": sample_cancer, "cnn": sample_cnn}


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


def build_cnn(hp: dict[str, Any]) -> nn.Module:
    """Conv layers (3x3, same padding, ReLU; the channels double per layer), one 2x2
    max-pool, a dense layer with dropout, 10 classes; input 1x8x8."""
    layers: list[nn.Module] = [nn.Unflatten(1, (1, 8, 8))]
    width = 1
    for i in range(hp["conv_layers"]):
        out = hp["channels"] * 2 ** i
        layers += [nn.Conv2d(width, out, 3, padding=1), nn.ReLU()]
        width = out
    layers += [nn.MaxPool2d(2), nn.Flatten(), nn.Linear(width * 16, hp["dense"]), nn.ReLU(),
               nn.Dropout(hp["dropout"]), nn.Linear(hp["dense"], 10)]
    return nn.Sequential(*layers)


def build(hp: dict[str, Any]) -> nn.Module:
    if "d_model" in hp:
        return TabTransformer(hp, 30, 2)
    if "channels" in hp:
        return build_cnn(hp)
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


def _worker_init() -> None:
    torch.set_num_threads(1)


def _train_one(job: tuple[dict[str, Any], str, int, int, int, int]) -> dict[str, Any]:
    hp, which, data_seed, max_length, every, seed = job
    return train_curve(hp, load_data(data_seed, which), max_length, every, seed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=160)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--every", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", choices=sorted(SAMPLERS), default="digits")
    ap.add_argument("--jobs", type=int, default=1,
                    help="train this many curves at once, one process (one thread) each; "
                         "the same curves as --jobs 1, each timed in its own process")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(__file__).with_name(
        "curves.json" if args.set == "digits" else f"curves_{args.set}.json")
    torch.set_num_threads(1)
    rng = random.Random(args.seed)
    sample = SAMPLERS[args.set]
    jobs = [(sample(rng), args.set, args.seed, args.max_length, args.every,
             args.seed * 100003 + i)
            for i in range(args.trials)]
    curves = []
    with multiprocessing.get_context("spawn").Pool(max(1, args.jobs), _worker_init) as pool:
        for i, curve in enumerate(pool.imap(_train_one, jobs)):
            curves.append(curve)
            if (i + 1) % 10 == 0:
                print(f"{i + 1}/{args.trials} curves", flush=True)
    dataset = {
        "digits": "sklearn digits (1797 images, 70/30 split), MLPs",
        "cancer": "sklearn breast_cancer (569 rows, 30 features, standardized, 70/30 split), "
                  "feature-tokenizer transformers",
        "cnn": "sklearn digits (1797 images as 1x8x8, 70/30 split), small CNNs"}[args.set]
    meta = {"set": args.set, "dataset": dataset, "unit": "batches",
            "max_length": args.max_length, "every": args.every, "seed": args.seed,
            "torch": torch.__version__, "threads": 1, "jobs": args.jobs}
    out.write_text(json.dumps({"meta": meta, "curves": curves}))
    print(f"wrote {len(curves)} curves to {out}")


if __name__ == "__main__":
    main()
