"""The backend's live-job query through the Slurm CLI (``squeue``) and through pyslurm
(``Jobs.load()``), side by side on the Slurm 25.11 dev cluster (issue 34 item 3).

For each N (default 1,000 and 10,000): submit N held array tasks (arrays of at most
1,000, MaxArraySize 1001: what dethpc submits for a large search before tasks start),
then run the backend's ``poll(refs)`` ``--ticks`` times through each path, alternating,
and read per tick: slurmctld RPCs (``sdiag`` by type, the client ones), login-node CPU
seconds (this process's plus its children's: squeue and its parsing here, pyslurm's
unpacking in-process) and wall seconds. Both backends must give the same answer (checked
on the last tick). Needs root (sdiag -r is not used; deltas only), the 25.11 cluster
(``python -m dethpc.devcluster up --slurm 25.11``) and pyslurm installed
(``pip install $(python -m dethpc.devcluster pyslurm)``).

Usage: python bench/rpc/pyslurm_vs_cli.py [--trials 1000 10000] [--ticks 5]
       [--out bench/results/pyslurm_vs_cli.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench" / "rpc"))

from run import client, delta, sdiag  # noqa: E402

from dethpc.backends.base import JobRequest  # noqa: E402
from dethpc.backends.slurm import SlurmBackend  # noqa: E402
from dethpc.common.runner import CommandRunner, RecordingRunner  # noqa: E402
from dethpc.devcluster.lanes import lane_env, lane_layout  # noqa: E402
from dethpc.devcluster.releases import SlurmRelease  # noqa: E402

CHUNK = 1000


def cpu_now() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def submit_held(backend: SlurmBackend, n: int, work: Path) -> list[str]:
    refs: list[str] = []
    for start in range(0, n, CHUNK):
        count = min(CHUNK, n - start)
        d = work / f"a{start}"
        d.mkdir()
        script = d / "job.sbatch"
        script.write_text("#!/bin/bash\n#SBATCH --partition=debug\n#SBATCH --hold\n"
                          f"#SBATCH --output={d}/o-%A_%a.out\nsleep 600\n")
        refs += backend.submit(JobRequest(script=script, workdir=d, name="dethpc-bench-pyslurm",
                                          comment="dethpc:exp=0:batch=0",
                                          array_indices=tuple(range(count))))
    return refs


def one_tick(backend: SlurmBackend, refs: list[str]) -> tuple[dict, dict]:
    before, _ = sdiag()
    c0, t0 = cpu_now(), time.perf_counter()
    answer = backend.poll(refs)
    wall, cpu = time.perf_counter() - t0, cpu_now() - c0
    after, _ = sdiag()
    d = delta(after, before)
    d["REQUEST_STATS_INFO"] = d.get("REQUEST_STATS_INFO", 0)  # sdiag's own, left out
    return {"wall_s": wall, "cpu_s": cpu, "rpcs": client(d),
            "by_type": {k: v for k, v in d.items() if k != "REQUEST_STATS_INFO"}}, answer


def measure(n: int, ticks: int, work: Path) -> dict:
    cli = SlurmBackend(RecordingRunner(timeout=300.0))
    cli._poll._query_chosen = True  # the CLI path: no pyslurm
    fast = SlurmBackend(RecordingRunner(timeout=300.0))
    if fast._poll._query() is None:
        raise SystemExit("pyslurm is not usable here (not installed, or not this Slurm's "
                         "version): see the module docstring")
    refs = submit_held(cli, n, work)
    rows: dict[str, list[dict]] = {"cli": [], "pyslurm": []}
    try:
        answers = {}
        for _ in range(ticks):
            for name, b in (("cli", cli), ("pyslurm", fast)):
                row, answers[name] = one_tick(b, refs)
                rows[name].append(row)
        same = answers["cli"] == answers["pyslurm"]
    finally:
        CommandRunner().run(["scancel", *{r.split("_")[0] for r in refs}], check=False)
    out: dict = {"trials": n, "same_answer": same, "ticks": ticks}
    for name, rs in rows.items():
        out[name] = {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "rpcs")}
        out[name]["by_type_last"] = rs[-1]["by_type"]
    out["cpu_ratio_cli_over_pyslurm"] = round(out["cli"]["cpu_s"] / max(out["pyslurm"]["cpu_s"],
                                                                        1e-6), 2)
    out["wall_ratio_cli_over_pyslurm"] = round(out["cli"]["wall_s"] /
                                               max(out["pyslurm"]["wall_s"], 1e-6), 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--ticks", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "pyslurm_vs_cli.json"))
    args = ap.parse_args()
    os.environ.update(lane_env(lane_layout(1, release=SlurmRelease.V25_11)))
    cells = []
    with tempfile.TemporaryDirectory(prefix="dethpc-bench-pyslurm-") as tmp:
        for n in args.trials:
            d = Path(tmp) / str(n)
            d.mkdir()
            cell = measure(n, args.ticks, d)
            print(json.dumps(cell), flush=True)
            cells.append(cell)
    import pyslurm

    result = {"bench": "pyslurm_vs_cli", "host": platform.node(), "cpus": os.cpu_count(),
              "slurm": CommandRunner().run(["scontrol", "--version"]).stdout.strip(),
              "pyslurm": str(pyslurm.__version__), "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "cells": cells}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
