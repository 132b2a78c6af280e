"""Seconds from job start to the first training step: dethpc launchers vs srun+torchrun.

Usage: python bench/launch/run.py [--reps 3] [--out bench/results/launch.json]
Needs the dev cluster (`python -m dethpc.devcluster up`). Each repetition submits one
2-node x 2-process job per variant; the batch script writes its start time, rank 0 of
the payload writes the time after its first all_reduce. Jobs are polled with squeue.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAYLOAD = Path(__file__).with_name("first_step.py")
VARIANTS = {
    "dethpc_srun_mode": [sys.executable, "-m", "dethpc.launch.torch_distributed", "--mode", "srun",
                         "--", str(PAYLOAD)],
    "dethpc_torchrun_mode": [sys.executable, "-m", "dethpc.launch.torch_distributed", "--mode",
                             "torchrun", "--", str(PAYLOAD)],
    "hand_srun_torchrun": ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "torchrun",
                           "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
                           "--rdzv-endpoint=n1:$((15000 + SLURM_JOB_ID % 17000))",
                           "--rdzv-id=$SLURM_JOB_ID", str(PAYLOAD)],
}


def run_once(name: str, argv: list[str], work: Path) -> float:
    start, step = work / f"{name}.start", work / f"{name}.step"
    for f in (start, step):
        f.unlink(missing_ok=True)
    quoted = " ".join(a if "$" in a else json.dumps(a) for a in argv)
    script = work / f"{name}.sbatch"
    script.write_text(f"#!/bin/bash\ndate +%s.%N > {start}\nexport PYTHONPATH={REPO}\n"
                      f"{quoted} {step}\n")
    job = subprocess.run(["sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=2",
                          "--time=3", f"--output={work}/{name}.out", str(script)],
                         check=True, capture_output=True, text=True).stdout.strip()
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True,
                         text=True).stdout.strip():
        time.sleep(0.5)
    if not step.exists():
        raise SystemExit(f"{name}: job {job} wrote no step time; see {work}/{name}.out")
    return float(step.read_text()) - float(start.read_text())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "bench/results/launch.json"))
    parser.add_argument("--work", default="/tmp/dethpc-bench-launch")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.reps):
        for name, argv in VARIANTS.items():  # interleaved so load drifts hit all variants
            samples[name].append(round(run_once(name, argv, work), 3))
    result = {
        "what": "seconds from batch-script start to rank 0's first all_reduce, 2 nodes x 2 procs",
        "cluster": "dethpc dev cluster (4 fake nodes on one host, 2 cores), gloo, torch 2.13 CPU",
        "reps": args.reps,
        "median_s": {k: round(statistics.median(v), 3) for k, v in samples.items()},
        "samples_s": samples,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["median_s"], indent=2))


if __name__ == "__main__":
    main()
