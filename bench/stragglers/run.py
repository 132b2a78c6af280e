"""Straggler benchmark (issue 35 item 4): does ``describe`` name the slow rank, and never a
rank that is not slow?

On the dev cluster (lane 1's, or ``SLURM_CONF``'s), through an in-process daemon: a
2-node x 2-rank DDP trial of the preemption fixture (srun launcher, ``step_time`` 0.1 s
of work per batch on every rank), whose rank 3 sleeps ``slow_s`` more before each batch's
forward pass. Per cell (one ``slow_s``), once every rank has reported, the benchmark
samples ``describe``'s straggler every ``--every`` seconds for ``--samples`` samples and
records:

  named_rank3     share of the samples naming rank 3 on rank 3's node (goal: 1.0 when
                  slow_s is over the threshold's share of the busy time)
  named_other     share naming any other rank (goal: 0.0 in every cell)
  behind_pct      median over samples of the slowest rank's percentage over the median
                  (the figure the 20% threshold is compared with), whether or not named
  busy_ms         each rank's busy time per step (ms) at the last sample
  first_named_s   seconds from the trial's first step to the first sample naming rank 3
                  (the samples start once all 4 ranks have reported: after 5 steps each)
Writes bench/results/stragglers.json (parameters, raw samples, summary).

Usage: python bench/stragglers/run.py [--slow 0 0.01 0.03 0.1] [--samples 10] [--every 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dethpc.control.stragglers import find_straggler, read_rank_times  # noqa: E402
from tests.slurm.fixtures.harness import TRIAL_DIR, DaemonHarness, experiment_yaml  # noqa: E402

STEP_TIME_S = 0.1
BEHIND_PCT = 20.0
BATCHES = 100000   # the cell ends the trial itself


def rank_nodes(trial_dir: Path) -> dict[int, str]:
    """``{rank: node}`` from the ranks' own files."""
    return {t.rank: t.node for t in read_rank_times(trial_dir / "ranks")}


def cell(root: Path, slow_s: float, samples: int, every: float) -> dict[str, Any]:
    h = DaemonHarness.create(root, slots_per_node=2)
    try:
        raw = experiment_yaml(batches=BATCHES, pool="debug", hparams={
            "step_time": STEP_TIME_S, "slow_rank": 3 if slow_s else -1, "slow_s": slow_s})
        raw["entrypoint"] = ("python3 -m dethpc.launch.torch_distributed --mode srun -- "
                             f"python3 train.py --batches {BATCHES}")
        raw["resources"] = {"resource_pool": "debug", "slots_per_trial": 4}
        raw["slurm"] = {"stragglers": {"behind_pct": BEHIND_PCT}}
        exp = h.submit(raw, context=TRIAL_DIR)
        h.wait("the trial's job", lambda: h.job_ref(exp), timeout=300)
        trial_dir = h.trial_dir(exp)
        h.wait("the first step", lambda: (trial_dir / "steps.log").exists(), timeout=300)
        first_step = time.monotonic()
        h.wait("all 4 ranks to report", lambda: len(rank_nodes(trial_dir)) == 4, timeout=300)
        nodes = rank_nodes(trial_dir)
        rows: list[dict[str, Any]] = []
        first_named: float | None = None
        for _ in range(samples):
            h.tick()
            times = read_rank_times(trial_dir / "ranks")
            shown = find_straggler(times, BEHIND_PCT)
            slowest = find_straggler(times, 1e-9)   # the slowest whatever the threshold
            row = {"t": round(time.monotonic() - first_step, 1),
                   "named": None if shown is None else [shown.rank, shown.node],
                   "behind_pct": None if slowest is None else slowest.behind_pct,
                   "slowest": None if slowest is None else slowest.rank,
                   "busy_ms": {t.rank: round(t.busy_s * 1000, 1) for t in times},
                   "step_ms": {t.rank: round(t.step_s * 1000, 1) for t in times}}
            rows.append(row)
            if first_named is None and shown is not None and shown.rank == 3:
                first_named = row["t"]
            time.sleep(every)
        h.cancel_all_experiments()
    finally:
        h.cancel_all_experiments()
    pct = [r["behind_pct"] for r in rows if r["behind_pct"] is not None]
    return {
        "slow_s": slow_s, "nodes": nodes, "samples": rows,
        "named_rank3": round(sum(1 for r in rows if r["named"] == [3, nodes.get(3)])
                             / len(rows), 3),
        "named_other": round(sum(1 for r in rows if r["named"] and r["named"][0] != 3)
                             / len(rows), 3),
        "behind_pct": round(statistics.median(pct), 1) if pct else None,
        "busy_ms": rows[-1]["busy_ms"], "first_named_s": first_named,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slow", type=float, nargs="+", default=[0.0, 0.01, 0.03, 0.1])
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "stragglers.json")
    args = ap.parse_args()
    cells = []
    # a cancelled job's ranks may still write while the directory is removed
    with tempfile.TemporaryDirectory(prefix="stragglers-", ignore_cleanup_errors=True) as tmp:
        for i, slow in enumerate(args.slow):
            c = cell(Path(tmp) / f"c{i}" / "dethpc", slow, args.samples, args.every)
            print(f"slow_s={slow:g}: rank 3 named in {c['named_rank3']:.0%} of samples, "
                  f"another rank in {c['named_other']:.0%}; slowest {c['behind_pct']}% over "
                  f"the median; busy ms {c['busy_ms']}; first named "
                  f"{c['first_named_s']} s after the first step", flush=True)
            cells.append(c)
    out = {"about": __doc__.splitlines()[0], "when": time.strftime("%Y-%m-%d %H:%M:%S"),
           "host": platform.node(), "cpus": os.cpu_count(),
           "slurm_conf": os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"),
           "params": {"step_time_s": STEP_TIME_S, "behind_pct": BEHIND_PCT,
                      "samples": args.samples, "every_s": args.every, "ranks": "2 nodes x 2",
                      "slowed": "rank 3 sleeps slow_s before each forward pass"},
           "cells": cells}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
