"""Ray Tune's side of bench/peers: the whole search inside one Slurm allocation.

Owns: what Ray's documentation recommends for a search on Slurm ("Deploying on Slurm":
Ray started inside the allocation; here one node, so ``ray.init`` with the
allocation's CPUs, no dashboard): ``Tuner`` over the same space (a curve of
bench/asha/curves_cnn.json; the draws every system shares evaluated first, ``--draws``),
``ASHAScheduler`` on batches (grace period one
validation period, ``reduction_factor`` 4, ``max_t`` the budget: the same rungs as
dethpc's and Optuna's), ``--trials`` samples, one CPU a trial, as many at once as the
allocation has CPUs. Run by ``ray_tune.sbatch`` (written by run.py). With
``--fault-tolerant`` (run.py's fault cells), what Ray's "How to Enable Fault Tolerance in
Ray Tune" recommends: each trial reports a checkpoint with every validation and resumes
from ``tune.get_checkpoint()``, and a requeued allocation continues the experiment with
``Tuner.restore(..., resume_errored=True)`` when ``Tuner.can_restore`` finds it.
Must not: be imported by dethpc.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import cnn
import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search.basic_variant import BasicVariantGenerator


def trainable(config: dict[str, int]) -> None:
    curve = int(config["curve"])
    trial = tune.get_context().get_trial_id()
    keep = bool(config.get("checkpoint"))
    state = None
    if keep and (ckpt := tune.get_checkpoint()) is not None:
        with ckpt.as_directory() as d:
            state = (Path(d) / "state.bin").read_bytes()
    trainer = cnn.Trainer(curve, state)

    def on_validation(length: int, loss: float) -> bool:
        cnn.record("ray", trial, curve, length, loss)
        if not keep:
            tune.report({"loss": loss, "batches": length})
            return True
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "state.bin").write_bytes(trainer.save())
            tune.report({"loss": loss, "batches": length},
                        checkpoint=tune.Checkpoint.from_directory(d))
        return True

    trainer.train_to(cnn.BUDGET, on_validation, work=("ray", trial))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--trials", type=int, required=True)
    ap.add_argument("--storage", required=True)
    ap.add_argument("--temp-dir", required=True)
    ap.add_argument("--draws", default="",
                    help="comma-separated curves evaluated first, in this order (the "
                         "same draws as the other systems: run.py passes cnn.draws)")
    ap.add_argument("--fault-tolerant", action="store_true",
                    help="checkpoint every validation; restore a requeued experiment")
    args = ap.parse_args()
    points = [{"curve": int(c)} for c in args.draws.split(",") if c]
    cpus = int(os.environ.get("SLURM_CPUS_ON_NODE", "2"))
    ray.init(num_cpus=cpus, include_dashboard=False, _temp_dir=args.temp_dir,
             log_to_driver=False)
    path = os.path.join(args.storage, "peers")
    if args.fault_tolerant and tune.Tuner.can_restore(path):
        tune.Tuner.restore(path, trainable, resume_errored=True).fit()
        return
    space = {"curve": tune.randint(0, cnn.N_CURVES), "checkpoint": args.fault_tolerant}
    if args.fault_tolerant:
        points = [{**pt, "checkpoint": True} for pt in points]
    tuner = tune.Tuner(
        trainable,
        param_space=space,
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
