"""ASHA vs random search per execution mode: the same replay as ``run.py`` over a grid.

Owns: running ``run.py``'s simulation (same searchers, same metric) for every cell of
curve set (digits MLPs, breast-cancer transformers, digits CNNs, the same CNNs trained
4x as long) x trial budget (32, 128) x queue
wait (0, 30, 300 s) x execution mode (per-job, pool) x ASHA ``mode`` (standard, the
default, and aggressive: one bracket, the most early stopping) x ASHA variant (stopping,
promotion), with random search run in the same mode as the ASHA it is compared with,
and writing ``bench/results/asha_pool.json``. Start costs are the measured ones
(``bench/results/asha_pool_costs.json``, ``costs.py``). The target is fixed before the
runs: a quantile of all final losses of the curve set, tighter for the larger budget
(``BUDGETS``). In pool mode the searchers may hand out ``POOL_CONCURRENCY`` x K trials
(items wait for a free worker), per-job mode allows K (one job per slot). The daemon's
latencies (first ``sbatch``, a run's exit path) are the ones ``e2e.py``'s real runs
showed in each mode.
Must not: be imported by dethpc.

Run: ``python bench/asha/sweep.py`` (a few minutes).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import (  # noqa: E402
    COSTS,
    CURVE_SETS,
    configs,
    load,
    measured_costs,
    simulate,
    summarize,
)

HERE = Path(__file__).resolve().parent
#: trial budget -> quantile of all curves' final losses used as the target
BUDGETS = {32: 0.10, 128: 0.025}
QUEUE_WAITS = (0.0, 30.0, 300.0)
MODES = ("per-job", "pool")
#: adaptive_asha ``mode``s compared (Determined's default first)
ASHA_MODES = ("standard", "aggressive")
#: searcher concurrency in pool mode, as a multiple of the workers
POOL_CONCURRENCY = 4


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def table(result: dict[str, Any]) -> str:
    """The README's markdown table of every cell of a written ``asha_pool.json``: one row
    per curve set x budget x queue wait x execution mode, one column per ASHA mode and
    variant (speedup mean (median)), and the lowest utilisation among those four."""
    cols = [(m, v) for m in ASHA_MODES for v in ("stopping", "promotion")]
    lines = ["| curves | trials | queue wait | mode | "
             + " | ".join(f"{m} {v}" for m, v in cols)
             + " | reached (ASHA/random) | utilisation mean, lowest |",
             "| --- | --- | --- | --- | " + " | ".join("---" for _ in cols) + " | --- | --- |"]
    rows: dict[tuple[Any, ...], dict[tuple[str, str], dict[str, Any]]] = {}
    for c in result["cells"]:
        key = (c["curves"], c["trials"], c["queue_wait_s"], c["mode"])
        rows.setdefault(key, {})[(c.get("asha_mode", "standard"), c["variant"])] = c
    for (curves, trials, wait, mode), cells in rows.items():
        got = [cells[k] for k in cols if k in cells]
        speed = [f"{_x(cells[k]['speedup_time_to_target_mean'])}x "
                 f"({_x(cells[k]['speedup_time_to_target_median'])}x)" if k in cells else "-"
                 for k in cols]
        reached = min(c["runs_reaching_target"] for c in got)
        util = min((c["utilisation_mean"] for c in got if c["utilisation_mean"] is not None),
                   default=None)
        lines.append(f"| {curves} | {trials} | {wait:.0f} s | {mode} | " + " | ".join(speed)
                     + f" | {reached}/{got[0]['random_runs_reaching_target']} | {_x(util)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "asha_pool.json")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--job-start-s", type=float, default=None,
                    help="charge this fresh-job start instead of the measured one (a "
                         "sensitivity run; the measured one is the default)")
    ap.add_argument("--time-scale", type=float, default=1.0,
                    help="multiply the curves' recorded seconds (a sensitivity: trials "
                         "that many times longer than recorded, the same losses)")
    ap.add_argument("--sets", nargs="+", choices=sorted(CURVE_SETS), default=list(CURVE_SETS),
                    help="the curve sets to run (all by default)")
    ap.add_argument("--table", action="store_true",
                    help="print the markdown table of --out (already written) and exit")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.out.read_text())))
        return
    if args.seeds < 1 or args.workers < 1:
        raise SystemExit("sweep.py: --seeds and --workers must be >= 1")
    per_mode = {m: measured_costs(mode=m) for m in MODES}
    if args.job_start_s is not None:
        per_mode = {m: replace(c, job_start_s=args.job_start_s) for m, c in per_mode.items()}
    costs = per_mode["pool"]
    cells: list[dict[str, Any]] = []
    metas: dict[str, Any] = {}
    for set_name in args.sets:
        meta, curves = load(CURVE_SETS[set_name], args.time_scale)
        metas[set_name] = meta
        finals = sorted(c.loss[-1] for c in curves)
        for budget, quantile in BUDGETS.items():
            target = finals[int(quantile * (len(finals) - 1))]
            for wait in QUEUE_WAITS:
                for mode, asha_mode in ((m, a) for m in MODES for a in ASHA_MODES):
                    ns = argparse.Namespace(
                        trials=budget, workers=args.workers, exec=mode,
                        concurrency=args.workers * (POOL_CONCURRENCY if mode == "pool" else 1),
                        **asdict(replace(per_mode[mode], queue_wait_s=wait)),
                        validation_period=meta["max_length"] // 16,
                        mode=asha_mode, divisor=4, max_rungs=5)
                    runs = []
                    for seed in range(args.seeds):
                        row: dict[str, Any] = {"seed": seed}
                        for name, config in configs(ns, meta["max_length"]).items():
                            row[name] = simulate(config, curves, seed, ns, target)
                        runs.append(row)
                    for name, s in summarize(runs).items():
                        cells.append({
                            "curves": set_name, "trials": budget, "queue_wait_s": wait,
                            "mode": mode, "asha_mode": asha_mode,
                            "variant": name.removeprefix("asha_"),
                            "workers": args.workers, "searcher_concurrency": ns.concurrency,
                            "target_quantile": quantile, "target_loss": target, **s})
                        print(f"{set_name:6s} {budget:4d} wait {wait:5.0f}s {mode:7s} "
                              f"{asha_mode:10s} "
                              f"{name:15s} speedup "
                              f"{s['speedup_time_to_target_mean'] or float('nan'):.2f}x "
                              f"(median {s['speedup_time_to_target_median'] or float('nan'):.2f})"
                              f" util {s['utilisation_mean'] or float('nan'):.2f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "what": "ASHA vs random search (same execution mode), time until the best validation "
                "loss reaches the target (mean and median of per-seed ratios random/ASHA), "
                "and worker utilisation, per cell",
        "costs": {"from": str(COSTS.relative_to(HERE.parents[1]))
                  + (" (job_start_s overridden)" if args.job_start_s is not None else ""),
                  "job_start_s": costs.job_start_s, "warm_start_s": costs.warm_start_s,
                  "restore_s": costs.restore_s,
                  "daemon_latencies": {m: {"submit_s": c.submit_s, "release_s": c.release_s,
                                           "from": f"bench/results/asha_pool_e2e_{m}.json"}
                                       for m, c in per_mode.items()}},
        "curves_meta": metas, "time_scale": args.time_scale, "seeds": args.seeds,
        "cells": cells}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
