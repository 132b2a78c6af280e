"""One real ASHA experiment on the dev cluster vs the simulation of the same configuration.

Owns: per seed, a private dethpc home (its own store, its own ``dethpc daemon run``,
partition ``debug``), one ``adaptive_asha`` experiment submitted with ``dethpc submit``
whose trials are ``e2e_trial.py`` (a real job: ``import torch``, then the recorded
curve ``curve`` of a curve set replayed at its recorded durations, real checkpoints,
real stops), in ``--exec pool`` (``slurm.workers``: K workers preloading torch) or
``per-job`` mode; the time from ``submit``'s return (the experiment exists; the
daemon is started then, or with ``--warm-daemon`` it was started before and has backed
off, as one already running on a login node, and the submit wakes it) to the first
validation whose loss reaches the target (the trials' own wall-clock
stamps), and the experiment's whole wall time; then ``run.py``'s simulation of the
same searcher, seed, curves and workers, with the costs measured **in the same run**
just before the experiments (``costs.measure``: a fresh job's start alone, a restore,
and bursts of K jobs at once, from which the cores the dev cluster's starts share):
K workers or K trials importing torch together on this machine's cores start slower
than one alone, and the simulation shares ``start_cores`` among the starts in progress
(``run.py``'s processor-sharing start). Two latencies of the daemon are taken from the
real runs (medians over all seeds, the same for every seed's simulation), never the
time to target itself: its first ``sbatch`` after it starts (``submit_s``: boot, first
tick) and each run's exit path (``release_s``: from the run's last validation until the
daemon records its end and the slot is free). Writes
``bench/results/asha_pool_e2e_<exec>.json`` (per seed, real and simulated, and the
ratio of medians; goal: within 25%).
Must not: be imported by dethpc; leave jobs behind (its arrays are cancelled at the end).

Why replayed curves: on the 2-core dev machine K trainings at once would contend for
the cores and run slower than recorded, which the simulation (and a real cluster,
one core per trial) does not have; replaying keeps the training time equal on both
sides, so the comparison tests what the simulation adds: starts, queue, promotions,
stops, and the daemon's latencies.

Run: ``python bench/asha/e2e.py --exec pool --seeds 3`` (a minute or two per seed).
"""

from __future__ import annotations

import argparse
import json
import math
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
from sqlmodel import select

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from costs import measure, sim_costs  # noqa: E402
from run import CURVE_SETS, configs, load, simulate  # noqa: E402

from dethpc.control.daemon import backoff_s  # noqa: E402
from dethpc.store import Store  # noqa: E402
from dethpc.store.models import Batch, Experiment, Job  # noqa: E402

TERMINAL = ("COMPLETED", "ERROR", "CANCELED")


def searcher_yaml(args: argparse.Namespace, max_length: int) -> dict[str, Any]:
    return {"name": "adaptive_asha", "metric": "validation_loss", "smaller_is_better": True,
            "max_length": {"batches": max_length}, "max_trials": args.trials,
            "max_concurrent_trials": args.workers, "mode": "standard", "divisor": 4,
            "max_rungs": 5, "variant": args.variant}


def real_run(args: argparse.Namespace, seed: int, n_curves: int, max_length: int,
             target: float, root: Path) -> dict[str, Any]:
    home = root / f"seed{seed}"
    home.mkdir(parents=True)
    home.chmod(0o755)
    ctx = home / "context"
    ctx.mkdir()
    shutil.copy(HERE / "e2e_trial.py", ctx / "train.py")
    shutil.copy(CURVE_SETS[args.curves], ctx / "curves.json")
    (home / "cluster.yaml").write_text(yaml.safe_dump({
        "backend": "slurm", "runs_root": str(home / "runs"), "default_pool": "debug",
        "python": sys.executable, "tick_min_s": args.tick_min_s,
        "tick_max_s": args.tick_max_s,
        "pools": {"debug": {"partition": "debug", "cpus_per_slot": 1}}}))
    exp: dict[str, Any] = {
        "name": f"asha-e2e-{args.exec}-{seed}", "entrypoint": "python3 train.py",
        "hyperparameters": {"curve": {"type": "int", "minval": 0, "maxval": n_curves - 1}},
        "searcher": searcher_yaml(args, max_length), "max_restarts": 1,
        "reproducibility": {"experiment_seed": seed}}
    if args.exec == "pool":
        exp["slurm"] = {"workers": {"count": args.workers,
                                    "preload": ["torch", "dethpc.core"]}}
    (home / "experiment.yaml").write_text(yaml.safe_dump(exp))
    env = {**os.environ, "DETHPC_HOME": str(home),
           "DETHPC_CLUSTER_CONFIG": str(home / "cluster.yaml")}
    store = Store(f"sqlite:///{home / 'dethpc.db'}")
    log = (home / "daemon.log").open("wb")

    def start_daemon() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "dethpc.surfaces.cli.main", "daemon", "run"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)

    daemon = None
    if args.warm_daemon:
        # a daemon already running with nothing to do: backed off to tick_max_s, and at
        # a random point of that sleep; the submit wakes it (dethpc.control.service.wake)
        daemon = start_daemon()
        time.sleep(backoff_s(args.tick_min_s, args.tick_max_s) + 1.0
                   + random.Random(seed).uniform(0.0, args.tick_max_s))
    t_submit = time.time()
    out = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "submit",
                          str(home / "experiment.yaml"), str(ctx), "--no-daemon", "--json"],
                         capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"e2e.py: submit failed: {out.stderr.strip()[-2000:]}")
    exp_id = int(json.loads(out.stdout)["id"])
    t0 = time.time()                     # the experiment exists; a daemon starts working
    if daemon is None:
        daemon = start_daemon()
    state = ""
    seen_states: list[tuple[float, str]] = []
    try:
        deadline = time.monotonic() + args.timeout_s
        while time.monotonic() < deadline:
            with store.session() as s:
                row = s.get(Experiment, exp_id)
                state = str(row.state) if row else ""
                run_dir = Path(row.run_dir) if row else home
            if not seen_states or seen_states[-1][1] != state:
                seen_states.append((time.time() - t0, state))
            if state in TERMINAL:
                break
            time.sleep(0.5)
        end = time.time()
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        with store.session() as s:
            ids = sorted({b.array_job_id for b in s.exec(select(Batch)) if b.array_job_id})
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, check=False)
    if state != "COMPLETED":
        raise SystemExit(f"e2e.py: seed {seed}: experiment {exp_id} ended {state or 'never'}"
                         f"; see {home / 'daemon.log'}")
    with store.session() as s:
        created = [b.created_at for b in s.exec(select(Batch))]
        ended = [(j.trial_id, j.ended_at) for j in s.exec(select(Job)) if j.ended_at]
    stamps = []
    by_trial: dict[int, list[float]] = {}
    for f in sorted((run_dir / "trials").glob("*/e2e.jsonl")):
        mine = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        stamps += mine
        by_trial[int(f.parent.name)] = [r["t"] for r in mine]
    # per run: its last validation to the daemon recording its end (the slot is free)
    releases = []
    for trial_id, job_end in ended:
        before = [t for t in by_trial.get(trial_id, []) if t <= job_end]
        if before:
            releases.append(job_end - max(before))
    hits = sorted(r["t"] - t0 for r in stamps if r["loss"] <= target)
    return {"time_to_target_s": hits[0] if hits else None, "total_time_s": end - t0,
            "first_validation_s": min((r["t"] - t0 for r in stamps), default=None),
            "validations": len(stamps), "submit_cli_s": t0 - t_submit,
            "first_sbatch_s": min(created) - t0 if created else None,
            "releases_s": releases, "states": seen_states, "home": str(home)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exec", choices=["per-job", "pool"], default="pool")
    ap.add_argument("--variant", choices=["stopping", "promotion"], default="promotion")
    ap.add_argument("--curves", choices=sorted(CURVE_SETS), default="cancer")
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--tick-min-s", type=float, default=0.2,
                    help="the private daemon's tick_min_s (dethpc's default: 0.5)")
    ap.add_argument("--tick-max-s", type=float, default=1.0,
                    help="the private daemon's tick_max_s (dethpc's default: 10)")
    ap.add_argument("--target-quantile", type=float, default=0.10)
    ap.add_argument("--timeout-s", type=float, default=480.0)
    ap.add_argument("--cost-jobs", type=int, default=4,
                    help="fresh jobs measured alone before the runs (and 2 bursts of "
                         "--workers jobs)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the runs' homes (logs)")
    ap.add_argument("--warm-daemon", action="store_true",
                    help="start each run's daemon before the submit and let it back off "
                         "to --tick-max-s (a daemon already running on the login node); "
                         "without it the daemon starts with the submit")
    args = ap.parse_args()
    for name in ("trials", "workers", "seeds"):
        if getattr(args, name) < 1:
            print(f"e2e.py: --{name} must be >= 1, got {getattr(args, name)}",
                  file=sys.stderr)
            return 2
    if shutil.which("sbatch") is None:
        print("e2e.py: sbatch not found: start the dev cluster "
              "(python -m dethpc.devcluster up)", file=sys.stderr)
        return 2
    out = args.out or REPO / "bench" / "results" / f"asha_pool_e2e_{args.exec}.json"
    meta, curves = load(CURVE_SETS[args.curves])
    finals = sorted(c.loss[-1] for c in curves)
    target = finals[int(args.target_quantile * (len(finals) - 1))]
    root = Path(tempfile.mkdtemp(prefix="asha-e2e-"))
    cost_dir = root / "costs"
    cost_dir.mkdir()
    measured = measure(cost_dir, args.cost_jobs, args.workers, 2, 120.0)
    costs = {"start_cores": math.inf, **sim_costs(measured)}
    print(f"costs measured now: {costs}", flush=True)
    ns = argparse.Namespace(trials=args.trials, workers=args.workers, exec=args.exec,
                            concurrency=args.workers, queue_wait_s=0.0,
                            validation_period=meta["max_length"] // 16,
                            mode="standard", divisor=4, max_rungs=5, **costs)
    config = configs(ns, meta["max_length"])[f"asha_{args.variant}"]
    reals = [real_run(args, seed, len(curves), meta["max_length"], target, root)
             for seed in range(args.first_seed, args.first_seed + args.seeds)]
    # the daemon's boot and first tick before its first sbatch: measured in these runs
    # (the median over the seeds, the same for every seed's simulation)
    firsts = [r["first_sbatch_s"] for r in reals if r["first_sbatch_s"] is not None]
    # (a woken daemon may submit before the CLI has returned: never below 0)
    ns.submit_s = costs["submit_s"] = max(0.0, statistics.median(firsts)) if firsts else 0.0
    # and each run's exit path: last validation -> the daemon records its end
    releases = [x for r in reals for x in r["releases_s"]]
    ns.release_s = costs["release_s"] = statistics.median(releases) if releases else 0.0
    rows: list[dict[str, Any]] = []
    for seed, real in enumerate(reals, start=args.first_seed):
        sim = simulate(config, curves, seed, ns, target)
        # the start this run saw: its first validation less the simulated work before it
        flat = simulate(config, curves, seed,
                        argparse.Namespace(**{**vars(ns), "start_cores": math.inf}), target)
        seen = (real["first_validation_s"] or 0.0) - (flat["first_validation_s"]
                                                      - costs["job_start_s"])
        ns_seen = argparse.Namespace(**{**vars(ns), "job_start_s": max(0.0, seen),
                                        "start_cores": math.inf})
        cal = simulate(config, curves, seed, ns_seen, target)
        keys = ("time_to_target_s", "total_time_s", "first_validation_s", "jobs_started",
                "trials")
        rows.append({"seed": seed, "real": {**real, "job_start_seen_s": seen},
                     "sim": {k: sim[k] for k in keys},
                     "sim_start_as_seen": {k: cal[k] for k in keys}})
        print(f"seed {seed}: real {real['time_to_target_s']} s to target "
              f"({real['total_time_s']:.1f} s in all), sim {sim['time_to_target_s']} s "
              f"({sim['total_time_s']:.1f} s)", flush=True)

    def med(side: str, key: str) -> float | None:
        v = [r[side][key] for r in rows if r[side][key] is not None]
        return statistics.median(v) if v else None

    summary: dict[str, dict[str, float | None]] = {}
    for key in ("time_to_target_s", "first_validation_s", "total_time_s"):
        r, s, c = med("real", key), med("sim", key), med("sim_start_as_seen", key)
        summary[key] = {"real_median_s": r, "sim_median_s": s,
                        "sim_over_real": None if r is None or s is None or r == 0 else s / r,
                        "sim_start_as_seen_median_s": c,
                        "sim_start_as_seen_over_real":
                            None if r is None or c is None or r == 0 else c / r}
    summary["job_start_seen_s"] = {"median": med("real", "job_start_seen_s"),
                                   "measured_alone": costs["job_start_s"],
                                   "start_cores": costs["start_cores"]}
    result = {"what": "real ASHA experiment on the dev cluster vs the simulation of the same "
                      "configuration (goal: sim within 25% of the real median)",
              "exec": args.exec, "variant": args.variant, "curves": args.curves,
              "trials": args.trials, "workers": args.workers, "target_loss": target,
              "daemon_ticks": {"tick_min_s": args.tick_min_s, "tick_max_s": args.tick_max_s},
              "warm_daemon": args.warm_daemon,
              "target_quantile": args.target_quantile,
              "costs": {**costs, "measured_in_this_run": measured,
                        "load_avg_1m_after": round(os.getloadavg()[0], 2)},
              "summary": summary, "runs": rows}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
