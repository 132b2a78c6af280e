"""Stage 1, start: a training loop inside ``det.core.init()``, nothing else.

Written as for Determined 0.38's Core API tutorial; the one dethpc line is the
import (``import determined as det`` -> ``import dethpc as det``). The model
learns ``y = 2x - 1`` from random batches: tiny, CPU-only, a few seconds.
"""

from __future__ import annotations

import argparse
import logging

import torch

import dethpc as det


def train(steps: int) -> float:
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = torch.tensor(0.0)
    for step in range(steps):
        x = torch.randn(32, 1)
        loss = torch.nn.functional.mse_loss(model(x), 2 * x - 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % 10 == 0:
            logging.info("step %d: loss %.5f", step + 1, loss.item())
    return loss.item()


def main(core_context: det.core.Context, steps: int) -> None:
    del core_context  # stage 1 only runs inside the context
    logging.info("final loss %.5f", train(steps))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        main(core_context, args.steps)
