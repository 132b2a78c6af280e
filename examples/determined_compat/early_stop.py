"""Stopping early from the training code: ``report_early_exit(USER_REQUESTED_STOP)``
says why the trial ends before its length, then the script returns. Determined 0.38's
Core API; only the import differs.
"""

from __future__ import annotations

import argparse
import logging

import dethpc as det


def main(core_context: det.core.Context, steps: int, patience: int) -> None:
    best, since_best = float("inf"), 0
    for step in range(steps):
        steps_completed = step + 1
        # a loss that stops improving after step 3
        loss = max(1.0 / steps_completed, 0.25)
        core_context.train.report_validation_metrics(
            steps_completed=steps_completed, metrics={"val_loss": loss})
        best, since_best = (loss, 0) if loss < best else (best, since_best + 1)
        if since_best >= patience:
            logging.info("no improvement for %d steps: stopping at step %d", patience,
                         steps_completed)
            core_context.train.report_early_exit(det.core.EarlyExitReason.USER_REQUESTED_STOP)
            return


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--patience", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        main(core_context, args.steps, args.patience)
