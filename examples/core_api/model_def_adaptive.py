"""Stage 4, hyperparameter search: the trial's hyperparameters come from
``det.get_cluster_info().trial.hparams``; the searcher reads the validation
metric. Determined 0.38 Core API; only the import differs.

The training length lives here (``--steps``), as Determined 0.38 wants: with
``adaptive_asha`` the searcher's ``time_metric: batches`` is reported with the
validation metrics and ``max_time`` is the longest a trial may train.
"""

from __future__ import annotations

import argparse
import logging

import torch

import dethpc as det


def main(core_context: det.core.Context, steps: int) -> None:
    info = det.get_cluster_info()
    assert info is not None, "this example only runs on-cluster"
    hparams = info.trial.hparams
    torch.manual_seed(info.trial.trial_seed)
    model = torch.nn.Sequential(torch.nn.Linear(1, hparams["hidden"]), torch.nn.Tanh(),
                                torch.nn.Linear(hparams["hidden"], 1))
    opt = torch.optim.SGD(model.parameters(), lr=hparams["learning_rate"])
    for step in range(steps):
        x = torch.randn(hparams["global_batch_size"], 1)
        loss = torch.nn.functional.mse_loss(model(x), 2 * x - 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps_completed = step + 1
        if steps_completed % 10 == 0 or steps_completed == steps:
            with torch.no_grad():
                x = torch.linspace(-1, 1, 64).unsqueeze(1)
                val = torch.nn.functional.mse_loss(model(x), 2 * x - 1).item()
            core_context.train.report_training_metrics(
                steps_completed=steps_completed, metrics={"train_loss": loss.item()})
            core_context.train.report_validation_metrics(
                steps_completed=steps_completed,
                metrics={"val_loss": val, "batches": steps_completed})
            if core_context.preempt.should_preempt():
                return  # ASHA stopped this trial, or the experiment was paused


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        main(core_context, args.steps)
