"""Train DigitsTrial with dethpc.core.init() + Trainer: ``entrypoint: python3 train.py``.

On a cluster (DETHPC_TRIAL_DIR set) hyperparameters come from hparams.json and the
length is ``--batches`` when given, as Determined's ``fit(max_length=)``: under single,
random and grid it decides, longer or shorter than ``searcher.max_length``; under ASHA
a trial completes at it when shorter than its rung, and stops at the rung when longer.
Without it, target.json's length. Off-cluster ``python3 train.py`` uses DEFAULTS and
``--batches`` (200 unless given). Validation/checkpoint periods come from the
experiment config's min_validation_period / min_checkpoint_period when the daemon provides it.
"""

from __future__ import annotations

import argparse
import logging
import os

from model_def import DigitsTrial

import dethpc.core
from dethpc.pytorch import Batch, PyTorchTrialContext, Trainer, init_distributed

DEFAULTS = {"lr": 0.01, "hidden_size": 64, "dropout": 0.1, "optimizer": "adam",
            "global_batch_size": 32}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=None,
                        help="the trial's own length (default: the searcher's target; "
                             "200 off-cluster)")
    parser.add_argument("--checkpoint-period", type=int, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=os.environ.get("DETHPC_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with dethpc.core.init(distributed=init_distributed()) as core_context:
        hparams = {**DEFAULTS, **core_context.hparams}
        context = PyTorchTrialContext(core_context, hparams=hparams)
        trial = DigitsTrial(context)
        batches = args.batches
        if batches is None and core_context.searcher.target is None:
            batches = 200
        Trainer(trial, context).fit(max_length=Batch(batches) if batches else None,
                                    checkpoint_period=args.checkpoint_period)


if __name__ == "__main__":
    main()
