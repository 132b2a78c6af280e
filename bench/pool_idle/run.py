"""Allocated vs used worker-seconds of a small worker-pool ASHA search on the local backend
(issue 48's finding: the pool held 2.76 GPU-hours for 0.17 used).

One ASHA search of the toy trial (``tests/fixtures/toy``) in a pool, in a private
``DETHPC_HOME``: *allocated* is the sum over worker tasks of their run time (the local
spool's ``start_time``..``end_time``, what ``sacct`` would bill), *used* the sum of the
runs' ``wall_s`` (``pool/results``). ``--idle-exit-s`` sets ``slurm.workers.idle_exit_s``
(default: the documented default).

    .venv/bin/python -m bench.pool_idle.run [--trials 8] [--idle-exit-s 300]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "tests" / "fixtures" / "toy"


def _cli(env: dict[str, str], *args: str, timeout: float = 600) -> str:
    proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *args],
                          capture_output=True, text=True, env=env, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"dethpc {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
    return proc.stdout


def measure(home: Path, trials: int, batches: int, idle_exit_s: float | None) -> dict[str, Any]:
    cluster = {"backend": "local", "runs_root": str(home / "runs"),
               "local_max_concurrent": trials, "tick_min_s": 0.2, "tick_max_s": 2.0}
    (home / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    env = {**os.environ, "DETHPC_HOME": str(home),
           "DETHPC_CLUSTER_CONFIG": str(home / "cluster.yaml")}
    workers: dict[str, Any] = {"preload": ["dethpc.core"]}
    if idle_exit_s is not None:
        workers["idle_exit_s"] = idle_exit_s
    cfg = {"name": "pool-idle", "entrypoint": "python3 train.py",
           "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6},
                               "step_time": 0.1},
           "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                        "max_trials": trials, "max_concurrent_trials": trials,
                        "divisor": 4, "max_rungs": 3, "max_length": {"batches": batches},
                        "mode": "aggressive"},
           "reproducibility": {"experiment_seed": 7},
           "slurm": {"workers": workers}}
    path = home / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    t0 = time.time()
    exp = json.loads(_cli(env, "submit", str(path), str(TOY), "--json"))["id"]
    _cli(env, "experiment", "wait", str(exp), "--timeout", "900", timeout=960)
    decided = time.time() - t0
    run_dir = Path(json.loads(_cli(env, "experiment", "describe", str(exp), "--json"))["run_dir"])
    pool = run_dir / "pool"
    deadline = time.monotonic() + 600   # the workers' end is part of what they held
    tasks: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        tasks = [json.loads(p.read_text())
                 for p in (home / "local-spool" / "tasks").glob("*/state.json")]
        if tasks and all(t.get("end_time") for t in tasks if t.get("start_time")):
            break
        time.sleep(1)
    allocated = sum(t["end_time"] - t["start_time"] for t in tasks
                    if t.get("start_time") and t.get("end_time"))
    runs = [json.loads(p.read_text()) for p in pool.glob("results/**/*.json")]
    used = sum(float(r["wall_s"]) for r in runs)
    _cli(env, "daemon", "stop")
    return {"trials": trials, "idle_exit_s": idle_exit_s, "workers_started":
            sum(1 for t in tasks if t.get("start_time")), "runs": len(runs),
            "allocated_worker_s": round(allocated, 1), "used_worker_s": round(used, 1),
            "allocated_over_used": round(allocated / used, 2) if used else None,
            "search_decided_s": round(decided, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--batches", type=int, default=256, help="max_length (batches, 0.1 s each)")
    p.add_argument("--idle-exit-s", type=float, default=None)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pool-idle-") as tmp:
        print(json.dumps(measure(Path(tmp), args.trials, args.batches, args.idle_exit_s)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
