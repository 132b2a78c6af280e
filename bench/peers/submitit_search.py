"""submitit's side of bench/peers: a random search as one array, from the login node.

Owns: what submitit's documentation recommends (README "Job arrays":
``executor.map_array`` with ``slurm_array_parallelism``; the process waits on
``job.result()``): ``--trials`` curves drawn at random (seeded) from the same space,
each trained to the budget (random search: nothing stops a trial early).
Run as ``python submitit_search.py --folder F --seed N --trials 32 --slots 2``.
Must not: be imported by dethpc.
"""

from __future__ import annotations

import argparse

import cnn
import submitit


def train(curve: int) -> float:
    import os
    trial = os.environ.get("SLURM_ARRAY_TASK_ID", str(curve))
    return cnn.Trainer(curve).train_to(
        cnn.BUDGET, lambda n, loss: cnn.record("submitit", trial, curve, n, loss) or True,
        work=("submitit", trial))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--trials", type=int, required=True)
    ap.add_argument("--slots", type=int, required=True)
    ap.add_argument("--partition", default="debug")
    args = ap.parse_args()
    curves = cnn.draws(args.seed, args.trials)
    executor = submitit.AutoExecutor(folder=args.folder)
    executor.update_parameters(slurm_partition=args.partition, cpus_per_task=1,
                               timeout_min=60, slurm_array_parallelism=args.slots,
                               name="peers-submitit")
    jobs = executor.map_array(train, curves)
    losses = [job.result() for job in jobs]
    print(f"best loss {min(losses):.4f} of {len(losses)} trials")


if __name__ == "__main__":
    main()
