"""Request latency of an idle daemon: from ``dethpc submit`` (or kill) to the daemon acting.

Owns: one private dethpc home with a running ``dethpc daemon run`` (local backend,
dethpc's default ticks: ``tick_min_s`` 0.5, ``tick_max_s`` 10) that has nothing to do,
so it has backed off to a tick every ``tick_max_s``. Per sample: wait until the daemon
is fully backed off plus a random part of its longest sleep, ``dethpc submit`` a random
search of one sleeping toy trial (``tests/fixtures/toy``, 1 s per step, 600 steps), and
record the time from the experiment's row to the daemon's first batch (it records a
batch just before its ``sbatch``); then, after the same wait (the trial sleeps, the
daemon backs off again), ``dethpc experiment kill`` it and record the time from the kill
to the experiment's end. Two cells:

* ``wake``: the submitting CLI shares the daemon's ``$DETHPC_HOME``: its change touches
  ``daemon.wake`` (``dethpc.control.service.wake``), which the daemon stats between ticks;
* ``no-wake``: the CLI runs with another ``$DETHPC_HOME`` (the same database and
  cluster config), so the daemon never sees a wake: what every request paid before.

Writes (merges by cell) ``bench/results/wake.json``.
Must not: be imported by dethpc.

Run: ``python bench/wake/run.py --samples 8`` (about 12 minutes for both cells).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sqlmodel import select  # noqa: E402

from dethpc.control.daemon import backoff_s  # noqa: E402
from dethpc.store import Store  # noqa: E402
from dethpc.store.models import Batch, Event, Experiment  # noqa: E402

RESULTS = REPO / "bench" / "results" / "wake.json"
TOY = REPO / "tests" / "fixtures" / "toy"
TERMINAL = ("COMPLETED", "ERROR", "CANCELED")
#: the private daemon's tick_min_s: dethpc's default
TICK_MIN_S = 0.5


def _cli(env: dict[str, str], *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *args],
                         capture_output=True, text=True, env=env, timeout=120)
    if out.returncode != 0:
        raise SystemExit(f"wake bench: dethpc {' '.join(args)}: {out.stderr.strip()[-1500:]}")
    return out.stdout


def _poll(store: Store, exp_id: int, timeout_s: float, what: str) -> Any:
    """Wait (0.02 s polls of the store) until ``what`` happened; its time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with store.session() as s:
            if what == "batch":
                got = [b.created_at for b in s.exec(select(Batch).where(
                    Batch.experiment_id == exp_id))]
                if got:
                    return min(got)
            else:
                exp = s.get(Experiment, exp_id)
                if exp is not None and str(exp.state) in TERMINAL:
                    return exp.ended_at or time.time()
        time.sleep(0.02)
    raise SystemExit(f"wake bench: experiment {exp_id}: no {what} within {timeout_s:.0f}s")


def cell(name: str, samples: int, seed: int, idle_s: float, tick_max_s: float) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"dethpc-wake-{name}-"))
    home, other = root / "home", root / "client-home"
    home.mkdir()
    other.mkdir()
    cluster = root / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "backend": "local", "runs_root": str(root / "runs"), "python": sys.executable,
        "database_url": f"sqlite:///{root / 'dethpc.db'}",
        "tick_min_s": TICK_MIN_S, "tick_max_s": tick_max_s}))
    exp_yaml = root / "experiment.yaml"
    exp_yaml.write_text(yaml.safe_dump({
        "name": "wake", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6},
                            "step_time": 1.0},
        "searcher": {"name": "random", "metric": "validation_loss",
                     "max_length": {"batches": 600}, "max_trials": 1}}))
    daemon_env = {**os.environ, "DETHPC_HOME": str(home), "DETHPC_CLUSTER_CONFIG": str(cluster)}
    client_env = dict(daemon_env) if name == "wake" else {**daemon_env, "DETHPC_HOME": str(other)}
    store = Store(f"sqlite:///{root / 'dethpc.db'}")
    log = (root / "daemon.log").open("wb")
    daemon = subprocess.Popen([sys.executable, "-m", "dethpc.surfaces.cli.main", "daemon", "run"],
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=daemon_env)
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    try:
        for i in range(samples):
            # fully backed off (1+2+4+8 s idle for the defaults, then tick_max_s
            # sleeps), at a random point of a tick_max_s sleep
            time.sleep(idle_s + rng.uniform(0.0, tick_max_s))
            exp_id = int(json.loads(_cli(client_env, "submit", str(exp_yaml), str(TOY),
                                         "--no-daemon", "--json"))["id"])
            with store.session() as s:
                exp = s.get(Experiment, exp_id)
                assert exp is not None
                created = exp.created_at
            batch_at = _poll(store, exp_id, 4 * tick_max_s, "batch")
            # the trial sleeps through its steps: the daemon backs off again
            time.sleep(idle_s + rng.uniform(0.0, tick_max_s))
            t_kill = time.time()
            _cli(client_env, "experiment", "kill", str(exp_id))
            with store.session() as s:
                kill_ev = [e.time for e in s.exec(select(Event).where(
                    Event.experiment_id == exp_id, Event.kind == "kill"))]
            ended = _poll(store, exp_id, 4 * tick_max_s + 30, "end")
            rows.append({"sample": i, "submit_to_first_batch_s": batch_at - created,
                         "kill_to_end_s": ended - (min(kill_ev) if kill_ev else t_kill)})
            print(f"{name} {i}: submit -> batch {rows[-1]['submit_to_first_batch_s']:.2f} s, "
                  f"kill -> end {rows[-1]['kill_to_end_s']:.2f} s", flush=True)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        log.close()
    shutil.rmtree(root, ignore_errors=True)

    def stats(key: str) -> dict[str, float]:
        xs = sorted(r[key] for r in rows)
        return {"p50": statistics.median(xs), "mean": statistics.fmean(xs),
                "p95": xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))], "max": xs[-1]}

    return {"samples": samples, "submit_to_first_batch_s": stats("submit_to_first_batch_s"),
            "kill_to_end_s": stats("kill_to_end_s"), "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--cells", nargs="+", choices=["wake", "no-wake"],
                    default=["wake", "no-wake"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tick-max-s", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    # dethpc.control.daemon's back-off, and a margin
    idle_s = backoff_s(TICK_MIN_S, args.tick_max_s) + 2.0
    result = json.loads(args.out.read_text()) if args.out.exists() else {"cells": {}}
    result["what"] = ("an idle (backed-off) daemon: seconds from an experiment's row to the "
                      "daemon's first batch, and from a kill request to the experiment's end; "
                      "local backend, tick_min_s 0.5")
    for name in args.cells:
        c = cell(name, args.samples, args.seed, idle_s, args.tick_max_s)
        c.update({"tick_max_s": args.tick_max_s, "when": time.strftime("%Y-%m-%d %H:%M"),
                  "load_avg": os.getloadavg()})
        result["cells"][name] = c
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
