"""Several faults in one ASHA experiment, the long form (issue 15 item 1).

Runs ``tests/slurm/fixtures/multifault.MultiFaultRun`` on the dev cluster with many
more faults than the Slurm-tier test: ``--kills`` daemon SIGKILLs (default 20),
``--ctld`` slurmctld restarts (default 2; the run's end adds one more onto the site's
config while the experiment still runs) and ``--dbd`` slurmdbd outages (default 2,
each with the daemon down while jobs end and leave squeue), in a seeded random order
gated on the experiment's progress, for each ASHA variant asked for (stopping:
create/stop decisions; promotion: create/promote, several jobs per trial). Then the
same checks as the test: sacct ``-D``, job rows and exit records one to one, trials
equal to the searcher's creates, the searcher calls replayed into a fresh searcher.

Writes bench/results/multifault.json: the parameters, the host, and per variant the
counts (kills, daemon starts, slurmctld restarts, slurmdbd outages and their lengths,
jobs gone from squeue while down, failed sacct polls, backlog waits, trials, jobs,
runs, sacct runs, searcher calls and decisions), the mismatches (none expected) and
the wall time.

Usage: python bench/multifault/run.py [--kills 20] [--ctld 2] [--dbd 2] [--trials 32]
           [--variants stopping promotion] [--seed 15]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.slurm.fixtures.multifault import MultiFaultRun, schedule  # noqa: E402

OUT = REPO / "bench" / "results" / "multifault.json"


def one(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"multifault-{variant}-") as tmp:
        run = MultiFaultRun(Path(tmp), trials=args.trials, step_time=args.step_time,
                            variant=variant, seed=args.seed,
                            say=lambda m: print(f"[{variant}] {m}", flush=True))
        steps = schedule(args.seed, trials=args.trials, kills=args.kills, ctld=args.ctld,
                         dbd=args.dbd, spread=args.spread)
        try:
            run.run(steps, timeout=args.timeout)
            findings = run.check().as_json()
        except Exception as exc:  # noqa: BLE001 - recorded: the other variant still runs
            findings = {**run.findings.as_json(), "state": "NOT FINISHED",
                        "error": f"{type(exc).__name__}: {exc}"[:2000]}
            findings["mismatches"] = [*findings["mismatches"], findings["error"]]
    return {"variant": variant, "schedule": [[s.fault.value, s.after_ended, s.delay_s,
                                              s.down_s] for s in steps], **findings}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--ctld", type=int, default=2)
    ap.add_argument("--dbd", type=int, default=2)
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--step-time", type=float, default=0.5)
    ap.add_argument("--variants", nargs="+", default=["stopping", "promotion"],
                    choices=["stopping", "promotion"])
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--spread", type=float, default=0.3,
                    help="fault gates spread over this fraction of the trials' jobs")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.monotonic()
    results = [one(v, args) for v in args.variants]
    doc = {
        "benchmark": "multifault",
        "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "host": {"machine": platform.machine(), "python": platform.python_version(),
                 "node": platform.node()},
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        # the tree the run imported (the bench may run from an exported snapshot)
        "commit": os.environ.get("DETHPC_BENCH_COMMIT", ""),
        "results": results,
        "mismatches": sum(len(r["mismatches"]) for r in results),
        "wall_s": round(time.monotonic() - t0, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for r in results:
        print(f"{r['variant']}: {r['state']}, {r['kills']} kills, {r['ctld_restarts']} "
              f"slurmctld restarts, {r['dbd_outages']} slurmdbd outages, {r['trials']} "
              f"trials, {r['jobs']} jobs, {r['runs']} runs, {r['sacct_runs']} sacct runs, "
              f"{r['skipped']} faults skipped, {len(r['mismatches'])} mismatches, "
              f"{r['wall_s']} s")
    print(f"wrote {args.out}")
    done = all(r["state"] == "COMPLETED" and r["skipped"] == 0 for r in results)
    return 0 if doc["mismatches"] == 0 and done else 1


if __name__ == "__main__":
    raise SystemExit(main())
