"""Where ASHA beats random search: the same replay as ``run.py`` over a grid of cells.

Owns: running ``run.py``'s simulation (same curves, same searchers, same metric) for
every (trial budget, job start cost) cell, all in one run, and writing one table to
``bench/results/asha_sweep.json``. The target tightens with the budget (a larger
search is run to find a rarer configuration): ``target_quantile`` per budget below.
Must not: be imported by dethpc.

Run: ``python bench/asha/sweep.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import configs, load, simulate, summarize  # noqa: E402

HERE = Path(__file__).resolve().parent
#: trial budget -> quantile of all curves' final losses used as the target
BUDGETS = {32: 0.10, 128: 0.025}
#: seconds per job start: 3.0 ~ measured start of the digits trainer (python, torch,
#: dethpc, data) plus Slurm dispatch on the dev cluster; 1.0 = run.py's default; 0 = the
#: limit of trials much longer than their start-up
JOB_STARTS = (3.0, 1.0, 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--curves", type=Path, default=HERE / "curves.json")
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "asha_sweep.json")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=40)
    args = ap.parse_args()
    meta, curves = load(args.curves)
    finals = sorted(c.loss[-1] for c in curves)
    cells: list[dict[str, Any]] = []
    for budget, quantile in BUDGETS.items():
        target = finals[int(quantile * (len(finals) - 1))]
        for start in JOB_STARTS:
            ns = argparse.Namespace(trials=budget, workers=args.workers, job_start_s=start,
                                    validation_period=64, mode="standard", divisor=4,
                                    max_rungs=5)
            runs = []
            for seed in range(args.seeds):
                row: dict[str, Any] = {"seed": seed}
                for name, config in configs(ns, meta["max_length"]).items():
                    row[name] = simulate(config, curves, seed, ns, target)
                runs.append(row)
            summary = summarize(runs)
            cells.append({"trials": budget, "workers": args.workers, "job_start_s": start,
                          "target_quantile": quantile, "target_loss": target, **{
                              f"{name}_{key}": value for name, s in summary.items()
                              for key, value in s.items()}})
            print(f"trials {budget:4d} start {start:3.1f}s: time-to-target speedup "
                  f"stopping {summary['asha_stopping']['speedup_time_to_target_mean']:.2f}x "
                  f"(median {summary['asha_stopping']['speedup_time_to_target_median']:.2f}), "
                  f"promotion {summary['asha_promotion']['speedup_time_to_target_mean']:.2f}x "
                  f"(median {summary['asha_promotion']['speedup_time_to_target_median']:.2f})",
                  flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "what": "ASHA vs random search, time until the best validation loss reaches the "
                "target (mean and median of per-seed ratios random/ASHA), per cell",
        "curves_meta": meta, "seeds": args.seeds, "cells": cells}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
