"""The fixed cost of one experiment's reconcile: a tick and a fast tick (``run_fast``)
that each ingest one metric line of each of a few running trials, as the daemon runs
them (``Reconciling``) in ``bench/daemon_cost/run.py`` (4 trials at once, the searcher
kept between ticks in a ``SearcherMemo``), CPU seconds each (``time.process_time``), on
a real SQLite store built by the reconcile tests' helpers
(``tests/unit/control/test_tick_scale``).

``run.py``'s whole-daemon figure moves with the number of fast ticks the daemon's wake
timing gives a run (33 or 65 at 128 trials, whatever the tree) and with the machine's
load; this isolates the per-reconcile cost the daemon pays ~100 times a run.

Usage: python bench/daemon_cost/reconcile_fixed.py [TREE ...] [--rounds N] [--postgres]
-- each TREE a checkout (``git archive`` of a commit) whose ``dethpc`` and ``tests`` are
measured, each in its own process, the trees alternating round by round (default: this
one); ``--postgres``: the store on a throwaway PostgreSQL (``bench/pgserver.py``, a new
database per process). Prints one JSON line per tree: the median CPU of a tick and of a
fast tick.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
TRIALS, TICKS = 4, 30


def measure(tree: Path) -> dict[str, Any]:
    sys.path.insert(0, str(tree))
    from dethpc.common.paths import ExperimentPaths
    from dethpc.control.reconcile import ExperimentReconciler, SearcherMemo
    from dethpc.store import Store
    from dethpc.store.models import Experiment
    from tests.unit.control.test_tick_scale import experiment, infos_for

    tmp = Path(tempfile.mkdtemp(prefix="dethpc-reconcile-fixed-"))
    store = Store(os.environ.get("RECONCILE_DB_URL") or f"sqlite:///{tmp / 'd.sqlite'}")
    exp_id, refs = experiment(store, tmp, TRIALS)
    infos = infos_for(refs, set(refs))
    memo = SearcherMemo()
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        paths = ExperimentPaths(Path(exp.run_dir))

    def write(step: int) -> None:
        for tid in refs:
            with open(paths.trial(tid).ensure().metrics, "a") as f:
                kind = "validation" if step % 5 == 0 else "training"
                f.write(json.dumps({"kind": kind, "steps": step,
                                    "metrics": {"loss": 1.0 / step}}) + "\n")

    try:   # the tree's daemon reads the experiment with its searcher state (Reconciling)
        from dethpc.control.reconcile.searcher_memo import load_experiment
    except ImportError:
        load_experiment = None  # type: ignore[assignment]

    def one(fast: bool) -> float:
        c0 = time.process_time()
        with store.session() as s:
            extra: dict[str, Any] = {}
            if load_experiment is not None:
                exp, ss, text = load_experiment(s, exp_id)
                extra["state"] = (ss, text)
            else:
                exp = s.get(Experiment, exp_id)
            assert exp is not None
            rec = ExperimentReconciler(s, exp, {} if fast else infos, 1000.0, fast=fast,
                                       memo=memo, **extra)
            rec.run_fast(set(refs)) if fast else rec.run()
        memo.keep(exp_id, rec.kept())
        return time.process_time() - c0

    ticks, fasts = [], []
    for step in range(1, 2 * TICKS + 1, 2):
        write(step)
        ticks.append(one(False))
        write(step + 1)
        fasts.append(one(True))
    return {"tree": str(tree), "trials": TRIALS, "ticks": TICKS,
            "backend": store.engine.dialect.name,
            "tick_median_s": round(statistics.median(ticks[2:]), 5),
            "fast_median_s": round(statistics.median(fasts[2:]), 5)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trees", nargs="*", default=[str(HERE.parents[2])])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--postgres", action="store_true")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(Path(args.trees[0]).resolve())))
        return
    pg = None
    if args.postgres:
        sys.path.insert(0, str(HERE.parents[2]))
        from bench.pgserver import pgserver
        pg = pgserver().PgServer()
        pg.start()
    out: dict[str, list[dict[str, Any]]] = {t: [] for t in args.trees}
    try:
        for i in range(args.rounds):
            for j, tree in enumerate(args.trees):
                env = dict(os.environ)
                if pg is not None:
                    pg.create(f"fixed{i}_{j}")
                    env["RECONCILE_DB_URL"] = pg.url(f"fixed{i}_{j}")
                done = subprocess.run([sys.executable, str(HERE), "--one", tree],
                                      check=True, capture_output=True, text=True, env=env)
                out[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        if pg is not None:
            pg.stop()
    for tree, runs in out.items():
        print(json.dumps({"tree": tree, "rounds": len(runs),
                          "tick_median_s": statistics.median(r["tick_median_s"] for r in runs),
                          "fast_median_s": statistics.median(r["fast_median_s"] for r in runs),
                          "runs": runs}))


if __name__ == "__main__":
    main()
