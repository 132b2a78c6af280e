"""Warm start: the per-trial start of a pool worker (fork of a process that imported
torch once) vs a fresh process and a fresh Slurm job (issue 16 item 2).

A "trial" here is ``trial.py``: it imports what a torch training script imports
(torch, dethpc.core), builds a tiny model, and exits: its wall time is the start cost.

* ``fresh_process``: ``python trial.py`` in a new process (what every job pays today).
* ``warm_fork``: ``dethpc.launch.worker.forkserver.spawn`` from a process that preloaded
  torch and dethpc.core (what a pool worker pays per trial), fork to child exit.
* ``fresh_srun`` (``--slurm``): ``srun -N1 -n1 python trial.py`` on the dev cluster: a
  new allocation and step, then the fresh process (no queue wait: see bench/asha).
* ``--slurm`` also runs the first two modes inside an ``srun`` step on a dev-cluster
  node (``node_fresh_process``, ``node_warm_fork``).
* ``--image DIR`` (a Charliecloud image directory, e.g. the dev cluster's, whose python
  has torch and dethpc): ``image.runtime_fresh_process`` is ``ch-run DIR -- python
  trial.py`` per trial (what a pool item in an image paid while the worker ran on the
  host and exec-ed the runtime for each trial); ``image.in_image`` runs the first two
  modes inside one ``ch-run`` (what a worker running in the image pays).

Writes bench/results/pool_warm_start.json (p50/p95/min/max per mode, and the
one-time preload cost).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dethpc.launch.worker import forkserver  # noqa: E402

TRIAL = """\
import torch
import dethpc.core
model = torch.nn.Linear(4, 1)
model(torch.zeros(1, 4)).sum().backward()
"""
PRELOAD = ["torch", "dethpc.core"]


def _summary(samples: list[float]) -> dict[str, Any]:
    s = sorted(samples)
    return {"n": len(s), "p50_s": round(statistics.median(s), 4),
            "p95_s": round(s[min(len(s) - 1, int(0.95 * len(s)))], 4),
            "min_s": round(s[0], 4), "max_s": round(s[-1], 4)}


def fresh_process(script: Path, n: int) -> list[float]:
    out = []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(script)], check=True, env=env)
        out.append(time.perf_counter() - t0)
    return out


def warm_fork(script: Path, n: int) -> tuple[float, list[float]]:
    t0 = time.perf_counter()
    forkserver.preload(PRELOAD)
    preload_s = time.perf_counter() - t0
    out = []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(n):
        t0 = time.perf_counter()
        pid, _started = forkserver.spawn(["python3", str(script)], env, str(script.parent),
                                         script.parent / "trial.log")
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        out.append(time.perf_counter() - t0)
        if code != 0:
            raise SystemExit(f"warm trial failed ({code}): "
                             + (script.parent / "trial.log").read_text()[-2000:])
    return preload_s, out


def fresh_srun(script: Path, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(["srun", "-N1", "-n1", "--quiet", sys.executable, str(script)],
                       check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        out.append(time.perf_counter() - t0)
    return out


def local_cells(script: Path, n: int) -> dict[str, Any]:
    fresh = fresh_process(script, n)
    preload_s, warm = warm_fork(script, n)
    return {"fresh_process": _summary(fresh), "warm_fork": _summary(warm),
            "preload_once_s": round(preload_s, 3),
            "speedup_p50": round(statistics.median(fresh) / statistics.median(warm), 1)}


def image_cells(image: Path, python: str, script: Path, n: int) -> dict[str, Any]:
    """Cold (the runtime, python and torch per trial) vs inside one container."""
    run = ["ch-run", f"--cd={script.parent}", str(image), "--", python]
    env = {**os.environ, "USER": os.environ.get("USER") or getpass.getuser()}
    cold = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([*run, str(script)], check=True, env=env)
        cold.append(time.perf_counter() - t0)
    inner_script = script.parent / "warm_start.py"    # /tmp is shared with the container
    shutil.copy(__file__, inner_script)
    inner = subprocess.run([*run, str(inner_script), "--inner", "-n", str(n)], check=True,
                           capture_output=True, text=True, env=env)
    cells = json.loads(inner.stdout.strip().splitlines()[-1])
    return {"image": str(image), "python": python, "runtime_fresh_process": _summary(cold),
            "in_image": cells,
            "speedup_runtime_fresh_vs_in_image_warm_fork_p50": round(
                statistics.median(cold) / cells["warm_fork"]["p50_s"], 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10, help="trials per mode")
    ap.add_argument("--slurm", action="store_true", help="also measure on the dev cluster")
    ap.add_argument("--image", type=Path, default=None,
                    help="also measure in this Charliecloud image directory")
    ap.add_argument("--image-python", default="/opt/dethpc-venv/bin/python",
                    help="the image's python (the dev cluster image's by default)")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "pool_warm_start.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="warm-start-") as tmp:
        script = Path(tmp) / "trial.py"
        script.write_text(TRIAL)
        cells = local_cells(script, args.n)
        if args.inner:
            print(json.dumps(cells))
            return 0
        result: dict[str, Any] = {"host": platform.node(), "python": platform.python_version(),
                                  "time": int(time.time()), "local": cells}
        if args.slurm:
            result["fresh_srun"] = _summary(fresh_srun(script, args.n))
            inner = subprocess.run(
                ["srun", "-N1", "-n1", "--quiet", sys.executable, __file__, "--inner",
                 "-n", str(args.n)], check=True, capture_output=True, text=True,
                env={**os.environ, "PYTHONPATH": str(REPO)})
            node = json.loads(inner.stdout.strip().splitlines()[-1])
            result["node"] = node
            result["speedup_fresh_srun_vs_node_warm_fork_p50"] = round(
                result["fresh_srun"]["p50_s"] / node["warm_fork"]["p50_s"], 1)
        if args.image is not None:
            result["image"] = image_cells(args.image, args.image_python, script, args.n)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
