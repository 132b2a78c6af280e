"""Hyperparameter constraints: a trial whose hyperparameters cannot be built raises
``det.InvalidHP``; the search drops them and goes on (Determined's "HP search
constraints"). Written as for Determined 0.38's Core API; only the import differs.

The model is a toy: fit ``y = a*x`` with a step size ``lr``; the ``layout``
hyperparameter picks how, and ``"ragged"`` is a layout this code refuses, after one
validation was already reported (the searcher forgets it, as Determined's).
"""

from __future__ import annotations

import argparse
import logging

import dethpc as det


def main(core_context: det.core.Context, steps: int) -> None:
    info = det.get_cluster_info()
    assert info is not None, "this example only runs on-cluster"
    hparams = info.trial.hparams
    weight, lr = 0.0, float(hparams["lr"])
    for step in range(steps):
        grad = 2 * (weight - 3.0)        # d/dw of (w*x - 3x)^2 at x = 1
        weight -= lr * grad
        steps_completed = step + 1
        core_context.train.report_training_metrics(
            steps_completed=steps_completed, metrics={"loss": (weight - 3.0) ** 2})
        if steps_completed == 1:
            core_context.train.report_validation_metrics(
                steps_completed=steps_completed, metrics={"val_loss": (weight - 3.0) ** 2})
            if hparams["layout"] == "ragged":
                # raised inside core.init()'s block: the trial reports INVALID_HP and
                # exits 0; the searcher replaces it (random) instead of counting it
                raise det.InvalidHP(f"layout {hparams['layout']!r} cannot be built")
    core_context.train.report_validation_metrics(
        steps_completed=steps, metrics={"val_loss": (weight - 3.0) ** 2})
    logging.info("trained layout %s to weight %.3f", hparams["layout"], weight)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        main(core_context, args.steps)
