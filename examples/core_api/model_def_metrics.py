"""Stage 2, metrics: ``report_training_metrics`` / ``report_validation_metrics`` /
``report_progress`` (Determined 0.38 Core API; only the import differs)."""

from __future__ import annotations

import argparse
import logging

import torch

import dethpc as det


def validate(model: torch.nn.Module) -> float:
    x = torch.linspace(-1, 1, 64).unsqueeze(1)
    with torch.no_grad():
        return torch.nn.functional.mse_loss(model(x), 2 * x - 1).item()


def main(core_context: det.core.Context, steps: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        x = torch.randn(32, 1)
        loss = torch.nn.functional.mse_loss(model(x), 2 * x - 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps_completed = step + 1
        if steps_completed % 10 == 0:
            core_context.train.report_training_metrics(
                steps_completed=steps_completed, metrics={"train_loss": loss.item()})
            core_context.train.report_progress(steps_completed / steps)
        if steps_completed % 25 == 0 or steps_completed == steps:
            core_context.train.report_validation_metrics(
                steps_completed=steps_completed, metrics={"val_loss": validate(model)})


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        main(core_context, args.steps)
