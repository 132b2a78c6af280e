"""One experiment's reconcile ingesting 64 running trials x 10 metric lines each (a
validation every fifth line), CPU seconds per tick (``time.process_time``), on a real
SQLite store built by the reconcile tests' helpers (``tests/unit/control/test_tick_scale``).

It measures the ingest path (metric rows, the searcher fed, checkpoint GC's pass) apart
from the daemon's pacing: on a loaded machine ``run.py``'s whole-daemon figure moves
with the number of ticks and fast ticks, which depend on the scheduler (issue 47 item 2).

Usage: python bench/daemon_cost/ingest_tick.py [TREE] -- TREE: a checkout (``git
archive`` of a commit) whose ``dethpc`` and ``tests`` are measured (default: this one).
Prints one JSON line: the CPU of 7 ticks after a warm-up, and their median. Run two
trees alternately for a before/after.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

TREE = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TREE))

from dethpc.common.paths import ExperimentPaths  # noqa: E402
from dethpc.store import Store  # noqa: E402
from dethpc.store.models import Experiment  # noqa: E402
from tests.unit.control.test_tick_scale import experiment, infos_for, tick  # noqa: E402

TRIALS, LINES, TICKS = 64, 10, 8


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="dethpc-ingest-tick-"))
    store = Store(f"sqlite:///{tmp / 'd.sqlite'}")
    exp_id, refs = experiment(store, tmp, TRIALS)
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        paths = ExperimentPaths(Path(exp.run_dir))
    cpu: list[float] = []
    for rep in range(TICKS):
        first = 1 + rep * LINES
        for tid in refs:
            with open(paths.trial(tid).ensure().metrics, "a") as f:
                for step in range(first, first + LINES):
                    kind = "validation" if step % 5 == 0 else "training"
                    f.write(json.dumps({"kind": kind, "steps": step,
                                        "metrics": {"loss": 1.0 / step}}) + "\n")
        c0 = time.process_time()
        tick(store, exp_id, infos_for(refs, set(refs)))
        cpu.append(time.process_time() - c0)
    print(json.dumps({"tree": str(TREE), "trials": TRIALS, "lines_per_trial": LINES,
                      "cpu_s": [round(c, 4) for c in cpu[1:]],
                      "median_s": round(statistics.median(cpu[1:]), 4)}))


if __name__ == "__main__":
    main()
