"""Train DigitsTrial with dethpc.core.init() + Trainer: ``entrypoint: python3 train.py``.

On a cluster (DETHPC_TRIAL_DIR set) hyperparameters come from hparams.json and the
length from target.json; off-cluster ``python3 train.py`` uses DEFAULTS and
``--batches``. Validation/checkpoint periods come from the experiment config's
min_validation_period / min_checkpoint_period when the daemon provides it.
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
    parser.add_argument("--batches", type=int, default=200,
                        help="length off-cluster (on a cluster target.json wins)")
    parser.add_argument("--checkpoint-period", type=int, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=os.environ.get("DETHPC_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with dethpc.core.init(distributed=init_distributed()) as core_context:
        hparams = {**DEFAULTS, **core_context.hparams}
        context = PyTorchTrialContext(core_context, hparams=hparams)
        trial = DigitsTrial(context)
        Trainer(trial, context).fit(max_length=Batch(args.batches),
                                    checkpoint_period=args.checkpoint_period)


if __name__ == "__main__":
    main()
