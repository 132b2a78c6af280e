"""Optuna's side of bench/peers: one Slurm array task = one Optuna worker.

Owns: what Optuna's documentation recommends for a cluster with a shared file system
and no database (docs: "Easy Parallelization", the JournalStorage / JournalFileBackend
page, ``MaxTrialsCallback``): every array task loads (or creates) the same study from
one journal file and optimizes until the study holds ``--trials`` trials; pruning with
``SuccessiveHalvingPruner`` (ASHA's rule: ``min_resource`` = one validation period,
``reduction_factor`` 4, the same rungs as dethpc's and Ray's); the same space as every
other system (a curve of bench/asha/curves_cnn.json); the draws every system shares are
enqueued before the array starts (``--enqueue``: Optuna's ``enqueue_trial``, taken first
and in order; the seeded random sampler would only draw past them). Run by
``optuna_worker.sbatch`` (written by run.py) as
``python optuna_worker.py --journal J --study S --seed N --trials 32``.
Must not: be imported by dethpc.
"""

from __future__ import annotations

import argparse
import os

import cnn
import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.study import MaxTrialsCallback
from optuna.trial import TrialState


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--journal", required=True)
    ap.add_argument("--study", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--trials", type=int, required=True)
    ap.add_argument("--enqueue", default="",
                    help="create the study and enqueue these curves (comma-separated), "
                         "then exit: run before the array, so that the workers take the "
                         "same draws as the other systems, in order")
    args = ap.parse_args()
    task = int(os.environ.get("SLURM_ARRAY_TASK_ID", "0"))
    storage = JournalStorage(JournalFileBackend(args.journal))
    if args.enqueue:
        study = optuna.create_study(study_name=args.study, storage=storage,
                                    direction="minimize")
        for curve in args.enqueue.split(","):
            study.enqueue_trial({"curve": int(curve)})
        return
    study = optuna.create_study(
        study_name=args.study, storage=storage, load_if_exists=True, direction="minimize",
        sampler=optuna.samplers.RandomSampler(seed=args.seed * 1000 + task),
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=cnn.EVERY,
                                                      reduction_factor=4))

    def objective(trial: optuna.Trial) -> float:
        curve = trial.suggest_int("curve", 0, cnn.N_CURVES - 1)
        pruned = False

        def on_validation(length: int, loss: float) -> bool:
            nonlocal pruned
            cnn.record("optuna", str(trial.number), curve, length, loss)
            trial.report(loss, step=length)
            pruned = trial.should_prune()
            return not pruned

        loss = cnn.Trainer(curve).train_to(cnn.BUDGET, on_validation,
                                           work=("optuna", str(trial.number)))
        if pruned:
            raise optuna.TrialPruned()
        return loss

    study.optimize(objective, callbacks=[MaxTrialsCallback(
        args.trials, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING))])


if __name__ == "__main__":
    main()
