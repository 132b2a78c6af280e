"""Measure the start costs the ASHA simulation charges (issue 16 item 4).

Owns: on the dev cluster (real ``sbatch``, partition ``debug``, one job at a time, so
no queue wait), the start of a fresh job: from just before ``sbatch`` to the first line
of user code (``python_start_s``) and to the line after ``import torch`` and ``import dethpc.core``
(``job_start_s``: what a trial imports before its own code, and a pool worker preloads;
what the simulation charges a fresh job and a pool worker once);
inside the job, the restore of a checkpoint of the largest model of either curve set
(``torch.load`` + ``load_state_dict`` of model and Adam state, ``restore_s``). The
per-trial warm start of a pool worker is read from ``bench/results/pool_warm_start.json``
(``bench/pool/warm_start.py --slurm``: a fork of a worker that preloaded torch, measured
on a dev-cluster node). ``--burst K`` also submits K jobs at once (as a pool's K workers
or K concurrent trials start) and derives the cores their starts share:
``start_cores = K * job_start / burst job_start`` (processor sharing: K starts of W
seconds each on c < K cores all end after K * W / c). The dev cluster's nodes share
this machine's cores, so this is what ``e2e.py`` simulates with; a real cluster gives
each job its own cores. Writes ``bench/results/asha_pool_costs.json``; ``run.py`` and
``sweep.py`` take their defaults from it; ``e2e.py`` calls ``measure`` in its own run.
Must not: be imported by dethpc; leave jobs behind (each is waited for).

Run: ``python bench/asha/costs.py -n 8`` (about a minute on an idle dev cluster).
"""

from __future__ import annotations

import argparse
import json
import os
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
import dethpc.core
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


def _submit(tmp: Path, name: str) -> tuple[Path, float]:
    out = tmp / f"out-{name}.json"
    t0 = time.time()
    subprocess.run(["sbatch", "--parsable", "-p", "debug", "-N1", "-n1", "-t", "5",
                    f"--output={tmp}/slurm-%j.out", "--wrap",
                    f"exec {sys.executable} {tmp / 'job.py'} {out}"],
                   check=True, capture_output=True, text=True)
    return out, t0


def _collect(tmp: Path, out: Path, t0: float, deadline: float) -> dict[str, float]:
    while not out.exists() or not out.read_text().strip().endswith("}"):
        if time.monotonic() > deadline:
            raise SystemExit(f"costs.py: {out.name}: the job wrote nothing in time; "
                             f"see {tmp}")
        time.sleep(0.05)
    rec = json.loads(out.read_text())
    return {"python_start_s": rec["python"] - t0, "job_start_s": rec["torch"] - t0,
            "restore_s": rec["restore_s"], "checkpoint_bytes": rec["checkpoint_bytes"]}


def _drained() -> None:
    """Wait until the jobs of this user on ``debug`` have ended (the next start is alone)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        q = subprocess.run(["squeue", "-h", "--me", "-p", "debug", "-o", "%i"],
                           capture_output=True, text=True, check=False)
        if q.returncode == 0 and not q.stdout.strip():
            return
        time.sleep(0.2)


def one_job(tmp: Path, i: int, timeout_s: float) -> dict[str, float]:
    out, t0 = _submit(tmp, f"one{i}")
    rec = _collect(tmp, out, t0, time.monotonic() + timeout_s)
    _drained()                            # let the job end before the next is submitted
    return rec


def burst(tmp: Path, k: int, round_: int, timeout_s: float) -> list[dict[str, float]]:
    """K jobs submitted back to back; each one's start from its own ``sbatch``."""
    subs = [_submit(tmp, f"burst{round_}-{i}") for i in range(k)]
    deadline = time.monotonic() + timeout_s
    recs = [_collect(tmp, out, t0, deadline) for out, t0 in subs]
    _drained()
    return recs


def measure(tmp: Path, n: int, k: int, rounds: int, timeout_s: float) -> dict[str, Any]:
    """Fresh-job start alone (``n`` jobs, one at a time), restore, and (``k`` > 1)
    ``rounds`` bursts of ``k`` jobs; the summary ``run.py`` charges."""
    (tmp / "job.py").write_text(JOB)
    jobs = [one_job(tmp, i, timeout_s) for i in range(n)]
    alone = statistics.median(j["job_start_s"] for j in jobs)
    out: dict[str, Any] = {
        "fresh_job": {
            "how": "sbatch -p debug (idle cluster, one job at a time) until the first line "
                   "of user code (python_start) and until 'import torch, dethpc.core' "
                   "returned (job_start)",
            "python_start": _summary([j["python_start_s"] for j in jobs]),
            "job_start": _summary([j["job_start_s"] for j in jobs]),
        },
        "restore": {
            "how": "torch.load + load_state_dict of model and Adam state, MLP 64-512-512-"
                   "512-10 (the largest digits model), in the job, median of 5",
            "checkpoint_bytes": jobs[0]["checkpoint_bytes"],
            **_summary([j["restore_s"] for j in jobs]),
        },
        "jobs": jobs,
    }
    if k > 1 and rounds > 0:
        bursts = [j for r in range(rounds) for j in burst(tmp, k, r, timeout_s)]
        together = statistics.median(j["job_start_s"] for j in bursts)
        out["burst"] = {
            "how": f"{k} jobs submitted back to back ({rounds} rounds), each from its own "
                   "sbatch until 'import torch' returned; start_cores = k * alone / burst",
            "k": k, "rounds": rounds, "job_start": _summary([j["job_start_s"] for j in bursts]),
            "start_cores": round(k * alone / together, 3), "jobs": bursts,
        }
    return out


def sim_costs(measured: dict[str, Any]) -> dict[str, float]:
    """What ``run.py`` charges, from ``measure``'s result: the fresh-job start alone and
    the restore (medians), a pool worker's warm start (``pool_warm_start.json``) and, when
    bursts were measured, the cores the dev cluster's starts share."""
    warm = json.loads((RESULTS / "pool_warm_start.json").read_text())
    jobs = measured["jobs"]
    out = {"job_start_s": round(statistics.median(j["job_start_s"] for j in jobs), 3),
           "warm_start_s": warm["node"]["warm_fork"]["p50_s"],
           "restore_s": round(statistics.median(j["restore_s"] for j in jobs), 4)}
    if "burst" in measured:
        out["start_cores"] = measured["burst"]["start_cores"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=8, help="fresh jobs, one at a time")
    ap.add_argument("--burst", type=int, default=4,
                    help="also K jobs at once, to measure the cores their starts share "
                         "(0: skip)")
    ap.add_argument("--rounds", type=int, default=3, help="bursts of K")
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
    m = measure(tmp, args.n, args.burst, args.rounds, args.timeout_s)
    sim = sim_costs(m)
    jobs = m.pop("jobs")
    warm = json.loads((RESULTS / "pool_warm_start.json").read_text())
    result = {
        "what": "start costs charged by bench/asha's simulation, measured on the dev cluster",
        "time": int(time.time()),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        **m,
        "pool_warm_start": {
            "how": "bench/results/pool_warm_start.json node.warm_fork: fork of a worker "
                   "that preloaded torch and dethpc.core, on a dev-cluster node",
            **warm["node"]["warm_fork"],
            "preload_once_s": warm["node"]["preload_once_s"],
        },
        "sim_defaults": {k: sim[k] for k in ("job_start_s", "warm_start_s", "restore_s")},
        "dev_cluster_start_cores": sim.get("start_cores"),
        "jobs": jobs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("fresh_job", "restore", "sim_defaults",
                                             "dev_cluster_start_cores")}, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
