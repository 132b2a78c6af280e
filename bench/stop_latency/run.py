"""Stop latency: from a rung's validation written to disk to the stopped trial's exit.

One cell = one adaptive ASHA experiment (stopping variant, one bracket) of paced
toy trials (``trial.py``) run to its end by an in-process ``Daemon.run()`` (the real
loop, default tick settings) on the local backend or the dev cluster. For every
trial the searcher stopped, the cell records: the validation at the rung where it
was stopped (the last one written before the daemon's ``stop_requested`` event),
when the stop file appeared, when the trial left its loop, and whether it left
before its next rung. Every stop is a row, misses included (a stop the trial never
saw, or saw after its next rung). See README.md. Writes (merges by cell name)
``bench/results/stop_latency.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sqlmodel import select  # noqa: E402

from dethpc.backends.factory import make_backend  # noqa: E402
from dethpc.config import parse_experiment_config  # noqa: E402
from dethpc.config.model import ClusterConfig, ResourcePool  # noqa: E402
from dethpc.control import experiments  # noqa: E402
from dethpc.control.daemon import Daemon  # noqa: E402
from dethpc.store import Store  # noqa: E402
from dethpc.store.models import Event, Job  # noqa: E402
from dethpc.surfaces.views import describe_experiment  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = REPO / "bench" / "results" / "stop_latency.json"


@dataclass(frozen=True)
class StopRow:
    """One searcher stop. Times are seconds after the stop rung's validation."""

    trial_id: int
    stop_rung: int | None
    next_rung: int | None
    exit_step: int | None
    exit_reason: str | None
    to_stop_file_s: float | None
    to_exit_s: float | None
    landed: bool
    before_next_rung: bool
    why: str


def next_after(rungs: list[int], rung: int) -> int | None:
    later = [r for r in rungs if r > rung]
    return min(later) if later else None


def stop_row(trial_id: int, record: dict[str, Any] | None, stop_time: float | None,
             stop_file_mtime: float | None) -> StopRow:
    """What happened to one stop, from the trial's own record (``stoplat.json``), the
    daemon's ``stop_requested`` event time and the stop file's mtime."""
    if record is None:
        return StopRow(trial_id, None, None, None, None, None, None, False, False,
                       "no stoplat.json (the trial never ran to its loop's end)")
    validations = [(int(s), float(t)) for s, t in record["validations"]]
    rungs = [int(r) for r in record["validate_at"]]
    before = [v for v in validations if stop_time is None or v[1] <= stop_time]
    if not before:
        return StopRow(trial_id, None, None, record["step"], record["reason"], None, None,
                       False, False, "no validation before the stop request")
    rung, t_val = before[-1]
    nxt = next_after(rungs, rung)
    landed = record["reason"] == "stop"
    ahead = landed and (nxt is None or int(record["step"]) < nxt)
    if stop_time is None:
        why = "the trial had ended before the searcher's stop (no stop file written)"
    elif not landed:
        why = f"the trial ended {record['reason']} at step {record['step']} without the stop"
    elif not ahead:
        why = f"the stop landed at step {record['step']}, after the next rung {nxt}"
    else:
        why = "ok"
    return StopRow(
        trial_id, rung, nxt, int(record["step"]), str(record["reason"]),
        None if stop_file_mtime is None else round(stop_file_mtime - t_val, 4),
        round(float(record["exit_time"]) - t_val, 4) if landed else None,
        landed, ahead, why)


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def summarize(rows: list[StopRow]) -> dict[str, Any]:
    lat = [r.to_exit_s for r in rows if r.to_exit_s is not None]
    files = [r.to_stop_file_s for r in rows if r.to_stop_file_s is not None]
    n = len(rows)
    return {
        "stops": n, "landed": sum(r.landed for r in rows),
        "before_next_rung": sum(r.before_next_rung for r in rows),
        "fraction_before_next_rung": round(sum(r.before_next_rung for r in rows) / n, 4)
        if n else None,
        "to_exit_s": {"p50": quantile(lat, 0.5), "p95": quantile(lat, 0.95),
                      "max": max(lat) if lat else None,
                      "mean": round(statistics.fmean(lat), 4) if lat else None},
        "to_stop_file_s": {"p50": quantile(files, 0.5), "p95": quantile(files, 0.95),
                           "max": max(files) if files else None},
        "misses": [asdict(r) for r in rows if not r.before_next_rung],
    }


def experiment_config(args: argparse.Namespace) -> dict[str, Any]:
    env = [f"STOPLAT_CHECK_S={args.check_s}"] if args.check_s else []
    return {
        "name": f"stoplat-{args.cell}", "entrypoint": "python3 trial.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6},
                            "step_time": args.step_time},
        "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                     "smaller_is_better": True, "max_time": args.length,
                     "time_metric": "batches", "max_trials": args.trials,
                     "max_concurrent_trials": args.concurrency, "mode": "aggressive",
                     "divisor": 4, "max_rungs": 3, "stop_grace_s": 300},
        "environment": {"environment_variables": env},
        "max_restarts": 0,
        "reproducibility": {"experiment_seed": 5},
    }


def run_cell(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    pools = ({"default": ResourcePool(name="default", partition="debug", signal_grace_s=30)}
             if args.backend == "slurm" else {"default": ResourcePool(name="default")})
    cluster = ClusterConfig(backend=args.backend, runs_root=work / "runs", pools=pools,
                            local_max_concurrent=args.concurrency,
                            metrics_poll_s=args.poll_s, python=sys.executable)
    store = Store(f"sqlite:///{work}/dethpc.db")
    backend = make_backend(cluster)
    ctx = work / "context"
    ctx.mkdir()
    shutil.copy(HERE / "trial.py", ctx / "trial.py")
    cfg = parse_experiment_config(experiment_config(args))
    started = time.time()
    exp_id = experiments.create_experiment(store, cluster, cfg, ctx, backend)
    deadline = time.monotonic() + args.timeout_s
    try:
        Daemon(store, cluster, backend).run(
            until_idle=True, should_stop=lambda: time.monotonic() > deadline)
    finally:
        with store.session() as s:
            refs = sorted({j.ref.split("_")[0] for j in s.exec(select(Job).where(
                Job.live == True)) if j.ref})  # noqa: E712
        if refs and args.backend == "slurm":
            subprocess.run(["scancel", *refs], capture_output=True, check=False)
    d = describe_experiment(store, exp_id)
    with store.session() as s:
        stop_times = {e.trial_id: e.time for e in s.exec(select(Event).where(
            Event.experiment_id == exp_id, Event.kind == "stop_requested"))}
    trials_dir = Path(d["run_dir"]) / "trials"
    rows = []
    for t in d["trials"]:
        if t["searcher_status"] != "stopped":
            continue
        tdir = trials_dir / str(t["id"])
        rec_path, stop = tdir / "stoplat.json", tdir / "stop"
        rec = json.loads(rec_path.read_text()) if rec_path.exists() else None
        rows.append(stop_row(t["id"], rec, stop_times.get(t["id"]),
                             stop.stat().st_mtime if stop.exists() else None))
    return {
        "backend": args.backend, "state": d["state"], "trials": len(d["trials"]),
        "wall_s": round(time.time() - started, 1),
        "settings": {"step_time_s": args.step_time, "max_length": args.length,
                     "rungs_s": [round(args.length / 16 * args.step_time, 2),
                                 round(args.length / 4 * args.step_time, 2),
                                 round(args.length * args.step_time, 2)],
                     "concurrency": args.concurrency, "metrics_poll_s": args.poll_s,
                     "stop_check_interval_s": args.check_s or "default (0.1)",
                     "tick_min_s": cluster.tick_min_s, "tick_max_s": cluster.tick_max_s},
        **summarize(rows),
        "rows": [asdict(r) for r in rows],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cell", required=True, help="name of the result cell")
    p.add_argument("--backend", choices=("local", "slurm"), default="local")
    p.add_argument("--trials", type=int, default=48)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--length", type=int, default=320, help="max_time in batches")
    p.add_argument("--step-time", type=float, default=0.1)
    p.add_argument("--poll-s", type=float, default=0.2, help="cluster metrics_poll_s")
    p.add_argument("--check-s", type=float, default=0.0,
                   help="trial stop check interval (0: dethpc's default)")
    p.add_argument("--timeout-s", type=float, default=1200)
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="stoplat-"))
    try:
        cell = run_cell(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    cell["host"] = platform.node()
    cell["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"cells": {}}
    results["cells"][args.cell] = cell
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: v for k, v in cell.items() if k not in ("rows", "misses")},
                     indent=2))
    print(f"misses: {len(cell['misses'])}")


if __name__ == "__main__":
    main()
