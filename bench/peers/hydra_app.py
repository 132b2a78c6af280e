"""Hydra's side of bench/peers: the training as a Hydra app, swept by the submitit launcher.

Owns: the app (``@hydra.main``, the config in ``hydra_conf/``); run.py runs
``python hydra_app.py --multirun curve=<32 random curves> hydra.sweep.dir=...
hydra.launcher.submitit_folder=... hydra.launcher.array_parallelism=2`` (Hydra's basic
sweeper has no random sampling: the user lists the draws). The process blocks until
every job of the sweep has ended (the launcher waits on each job's result).
Must not: be imported by dethpc.
"""

from __future__ import annotations

import os

import cnn
import hydra
from omegaconf import DictConfig


@hydra.main(version_base=None, config_path="hydra_conf", config_name="config")
def main(cfg: DictConfig) -> float:
    curve = int(cfg.curve)
    trial = os.environ.get("SLURM_ARRAY_TASK_ID", str(curve))
    return cnn.Trainer(curve).train_to(
        cnn.BUDGET, lambda n, loss: cnn.record("hydra", trial, curve, n, loss) or True,
        work=("hydra", trial))


if __name__ == "__main__":
    main()
