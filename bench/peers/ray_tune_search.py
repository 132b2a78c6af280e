"""Ray Tune's side of bench/peers: the whole search inside one Slurm allocation.

Owns: what Ray's documentation recommends for a search on Slurm ("Deploying on Slurm":
Ray started inside the allocation; here one node, so ``ray.init`` with the
allocation's CPUs, no dashboard): ``Tuner`` over the same space (a curve of
bench/asha/curves_cnn.json; the draws every system shares evaluated first, ``--draws``),
``ASHAScheduler`` on batches (grace period one
validation period, ``reduction_factor`` 4, ``max_t`` the budget: the same rungs as
dethpc's and Optuna's), ``--trials`` samples, one CPU a trial, as many at once as the
allocation has CPUs. Run by ``ray_tune.sbatch`` (written by run.py).
Must not: be imported by dethpc.
"""

from __future__ import annotations

import argparse
import os

import cnn
import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search.basic_variant import BasicVariantGenerator


def trainable(config: dict[str, int]) -> None:
    curve = int(config["curve"])
    trial = tune.get_context().get_trial_id()

    def on_validation(length: int, loss: float) -> bool:
        cnn.record("ray", trial, curve, length, loss)
        tune.report({"loss": loss, "batches": length})
        return True

    cnn.Trainer(curve).train_to(cnn.BUDGET, on_validation)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--trials", type=int, required=True)
    ap.add_argument("--storage", required=True)
    ap.add_argument("--temp-dir", required=True)
    ap.add_argument("--draws", default="",
                    help="comma-separated curves evaluated first, in this order (the "
                         "same draws as the other systems: run.py passes cnn.draws)")
    args = ap.parse_args()
    points = [{"curve": int(c)} for c in args.draws.split(",") if c]
    cpus = int(os.environ.get("SLURM_CPUS_ON_NODE", "2"))
    ray.init(num_cpus=cpus, include_dashboard=False, _temp_dir=args.temp_dir,
             log_to_driver=False)
    tuner = tune.Tuner(
        trainable,
        param_space={"curve": tune.randint(0, cnn.N_CURVES)},
        tune_config=tune.TuneConfig(
            num_samples=args.trials, max_concurrent_trials=cpus,
            # one trial's actor runs the next (Tune's FAQ on reuse_actors): without it each
            # trial is a new worker process that imports torch again (4-5 s a trial here)
            reuse_actors=True,
            search_alg=BasicVariantGenerator(random_state=args.seed,
                                             points_to_evaluate=points or None),
            scheduler=ASHAScheduler(time_attr="batches", metric="loss", mode="min",
                                    max_t=cnn.BUDGET, grace_period=cnn.EVERY,
                                    reduction_factor=4)),
        run_config=tune.RunConfig(storage_path=args.storage, name="peers", verbose=0))
    tuner.fit()


if __name__ == "__main__":
    main()
