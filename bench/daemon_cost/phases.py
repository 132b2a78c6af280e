"""One daemon_cost cell with each daemon phase's own CPU, without a profiler.

Usage: ``COST_TREE=/tmp/before python bench/daemon_cost/phases.py [N]`` -- one cell of
``run.py``'s ``measure`` (a worker-pool random search of ``N`` trials, default 128, on the
local backend at the daemon's default pacing) with each function named in ``PHASES``
wrapped in a ``time.process_time`` timer (inclusive: a phase's callees count in it too).
Prints the cell's row with ``phases``: name -> [calls, CPU s]. cProfile's overhead falls
mostly on SQLAlchemy's many small calls, so its shares mislead (a profiled 128-trial cell
took 6.8 s of CPU, 2.1 s without); these timers add about a microsecond a call. A name
missing from a tree is skipped (said on stderr). Run it alternately on two trees
(``git archive``) for a before/after of the phases (issue 47 item 2).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, os.environ.get("COST_TREE") or str(HERE.parent.parent))
sys.path.insert(0, str(HERE))

#: (module, qualified name) of what is timed; a module that imported a function by name
#: gets the wrapped one too (``REBIND``)
PHASES = [
    ("dethpc.control.daemon.loop", "Daemon._tick"),
    ("dethpc.control.daemon.recovery", "Recovery.retry_cancels"),
    ("dethpc.control.daemon.recovery", "Recovery.adopt"),
    ("dethpc.control.daemon.shared", "Scope.open_resolved"),
    ("dethpc.control.daemon.poll", "Poller.observe"),
    ("dethpc.control.daemon.reconciling", "Reconciling.run"),
    ("dethpc.control.daemon.reconciling", "Reconciling.fast"),
    ("dethpc.control.daemon.watchdog", "Watchdog.run"),
    ("dethpc.control.daemon.submit", "SubmitPhase.run"),
    ("dethpc.control.daemon.submit", "Submitter.experiment"),
    ("dethpc.control.daemon.throttles", "sync_throttles"),
    ("dethpc.control.worker_pool_tend", "WorkerPoolTender.submit_items"),
    ("dethpc.control.worker_pool_tend", "WorkerPoolTender.tend"),
    ("dethpc.control.worker_pool_tend", "WorkerPoolTender.worker_refs"),
    ("dethpc.control.worker_pool_tend", "WorkerPoolTender.poll_items"),
    ("dethpc.control.daemon.batches", "TrialFiles.write"),
    ("dethpc.common.worker_queue", "enqueue"),
    ("dethpc.control.daemon.watch", "Watcher.refresh"),
    ("dethpc.control.daemon.watch", "Watcher.wait"),
    ("dethpc.control.daemon.tasks", "TaskWatch.live"),
    ("dethpc.control.adoption", "Adopter.scan"),
]
REBIND = [("dethpc.control.daemon.submit", "sync_throttles", "dethpc.control.daemon.throttles")]


def wrap(acc: dict[str, list[float]], modname: str, qual: str) -> None:
    owner: Any = importlib.import_module(modname)
    *path, name = qual.split(".")
    for part in path:
        owner = getattr(owner, part)
    real = getattr(owner, name)
    key = f"{modname.rsplit('.', 1)[-1]}.{qual}"

    @functools.wraps(real)
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            c = acc.setdefault(key, [0, 0.0])
            c[0] += 1
            c[1] += time.process_time() - t0

    setattr(owner, name, timed)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    acc: dict[str, list[float]] = {}
    for modname, qual in PHASES:
        try:
            wrap(acc, modname, qual)
        except (ImportError, AttributeError) as exc:
            print(f"skipped {modname}:{qual}: {exc}", file=sys.stderr)
    for modname, name, source in REBIND:
        setattr(importlib.import_module(modname), name,
                getattr(importlib.import_module(source), name))
    import run  # bench/daemon_cost/run.py

    out = run.measure(n, False)
    out["phases"] = {k: [int(v[0]), round(v[1], 3)]
                     for k, v in sorted(acc.items(), key=lambda kv: -kv[1][1])}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
