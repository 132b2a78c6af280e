"""Measure the start costs the ASHA simulation charges (issue 16 item 4).

Owns: on the dev cluster (real ``sbatch``, partition ``debug``, one job at a time, so
no queue wait), the start of a fresh job: from just before ``sbatch`` to the first line
of user code (``python_start_s``) and to the line after ``import torch``
(``job_start_s``, what the simulation charges a fresh job and a pool worker once);
inside the job, the restore of a checkpoint of the largest model of either curve set
(``torch.load`` + ``load_state_dict`` of model and Adam state, ``restore_s``). The
per-trial warm start of a pool worker is read from ``bench/results/pool_warm_start.json``
(``bench/pool/warm_start.py --slurm``: a fork of a worker that preloaded torch, measured
on a dev-cluster node). Writes ``bench/results/asha_pool_costs.json``; ``run.py`` and
``sweep.py`` take their defaults from it.
Must not: be imported by dethpc; leave jobs behind (each is waited for).

Run: ``python bench/asha/costs.py -n 8`` (about a minute on an idle dev cluster).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"

JOB = """\
import time
t_python = time.time()
import torch
t_torch = time.time()
import io, json, sys
from torch import nn
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                      nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters())
model(torch.zeros(2, 64)).sum().backward()
opt.step()
buf = io.BytesIO()
torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
restores = []
for _ in range(5):
    buf.seek(0)
    t0 = time.perf_counter()
    state = torch.load(buf)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    restores.append(time.perf_counter() - t0)
json.dump({"python": t_python, "torch": t_torch, "restore_s": sorted(restores)[2],
           "checkpoint_bytes": buf.getbuffer().nbytes}, open(sys.argv[1], "w"))
"""


def _summary(xs: list[float]) -> dict[str, Any]:
    s = sorted(xs)
    return {"n": len(s), "p50_s": round(statistics.median(s), 4),
            "p95_s": round(s[min(len(s) - 1, int(0.95 * len(s)))], 4),
            "min_s": round(s[0], 4), "max_s": round(s[-1], 4)}


def one_job(tmp: Path, i: int, timeout_s: float) -> dict[str, float]:
    out = tmp / f"out{i}.json"
    script = tmp / "job.py"
    t0 = time.time()
    subprocess.run(["sbatch", "--parsable", "-p", "debug", "-N1", "-n1", "-t", "5",
                    f"--output={tmp}/slurm-%j.out", "--wrap",
                    f"exec {sys.executable} {script} {out}"],
                   check=True, capture_output=True, text=True)
    deadline = time.monotonic() + timeout_s
    while not out.exists() or not out.read_text().strip().endswith("}"):
        if time.monotonic() > deadline:
            raise SystemExit(f"job {i} wrote nothing in {timeout_s:.0f} s; see {tmp}")
        time.sleep(0.05)
    rec = json.loads(out.read_text())
    time.sleep(0.5)                       # let the job end before the next is submitted
    return {"python_start_s": rec["python"] - t0, "job_start_s": rec["torch"] - t0,
            "restore_s": rec["restore_s"], "checkpoint_bytes": rec["checkpoint_bytes"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=8, help="fresh jobs, one at a time")
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "asha_pool_costs.json")
    args = ap.parse_args()
    if args.n < 1:
        print(f"costs.py: -n must be >= 1, got {args.n}", file=sys.stderr)
        return 2
    if shutil.which("sbatch") is None:
        print("costs.py: sbatch not found: start the dev cluster "
              "(python -m dethpc.devcluster up)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="asha-costs-", dir=str(REPO / ".devcluster")
                                if (REPO / ".devcluster").is_dir() else None))
    (tmp / "job.py").write_text(JOB)
    jobs = [one_job(tmp, i, args.timeout_s) for i in range(args.n)]
    warm = json.loads((RESULTS / "pool_warm_start.json").read_text())
    result = {
        "what": "start costs charged by bench/asha's simulation, measured on the dev cluster",
        "time": int(time.time()),
        "fresh_job": {
            "how": "sbatch -p debug (idle cluster, one job at a time) until the first line "
                   "of user code (python_start) and until 'import torch' returned "
                   "(job_start)",
            "python_start": _summary([j["python_start_s"] for j in jobs]),
            "job_start": _summary([j["job_start_s"] for j in jobs]),
        },
        "restore": {
            "how": "torch.load + load_state_dict of model and Adam state, MLP 64-512-512-"
                   "512-10 (the largest digits model), in the job, median of 5",
            "checkpoint_bytes": jobs[0]["checkpoint_bytes"],
            **_summary([j["restore_s"] for j in jobs]),
        },
        "pool_warm_start": {
            "how": "bench/results/pool_warm_start.json node.warm_fork: fork of a worker "
                   "that preloaded torch and dethpc.core, on a dev-cluster node",
            **warm["node"]["warm_fork"],
            "preload_once_s": warm["node"]["preload_once_s"],
        },
        "sim_defaults": {
            "job_start_s": round(statistics.median(j["job_start_s"] for j in jobs), 3),
            "warm_start_s": warm["node"]["warm_fork"]["p50_s"],
            "restore_s": round(statistics.median(j["restore_s"] for j in jobs), 4),
        },
        "jobs": jobs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("fresh_job", "restore", "sim_defaults")},
                     indent=1))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
