"""The daemon under slurmctld's per-user RPC rate limit at 1,000 live trials (issue 34
item 4): RPCs accepted and refused per minute, paced (what dethpc does) against not
paced, in one run.

On the Slurm 25.11 dev cluster, slurmctld restarts with
``SlurmctldParameters=rl_enable,rl_bucket_size=10,rl_refill_rate=1,rl_refill_period=10``
(the issue's example: 6 RPCs a minute) and ``rl_log_freq=0`` (every refusal logged with
its uid and RPC type). A non-root user on the normal QoS (``dethpc-bench``, created and
added to the accounting when missing) runs tests/slurm/scripts/limits_daemon.py: an
experiment of ``--trials`` trials, 16 CPUs each (4 run, one per node; the rest pend:
what a large search looks like while it waits), for ``--seconds`` per mode. slurmctld's
``sdiag`` (by message type, before and after) gives the accepted RPCs; its log the
refused ones, split into the daemon's and the jobs' own (srun's step RPCs, the trial
script's ``scontrol show job``). Between modes the user's jobs are cancelled.

Usage: python bench/rpc/ratelimit.py [--trials 1000] [--seconds 180]
       [--out bench/results/ratelimit.json]   (root; the 25.11 cluster up)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pwd
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench" / "rpc"))

from run import CLIENT_RPCS, delta, sdiag  # noqa: E402

from dethpc.common.runner import CommandRunner  # noqa: E402
from dethpc.devcluster.cluster import DevCluster  # noqa: E402
from dethpc.devcluster.faults import ClusterFaults, refused_rpcs  # noqa: E402
from dethpc.devcluster.lanes import lane_env, lane_layout  # noqa: E402
from dethpc.devcluster.releases import SlurmRelease  # noqa: E402

USER = "dethpc-bench"
RATE_LIMIT = ("rl_enable,rl_bucket_size=10,rl_refill_rate=1,rl_refill_period=10,"
              "rl_log_freq=0")
DRIVER = REPO / "tests" / "slurm" / "scripts" / "limits_daemon.py"
TOY = REPO / "tests" / "fixtures" / "toy"
PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
JOB_RPCS = ("REQUEST_HET_JOB_ALLOC_INFO", "REQUEST_JOB_ALLOCATION_INFO",
            "REQUEST_JOB_STEP_CREATE", "REQUEST_STEP_COMPLETE", "REQUEST_JOB_INFO_SINGLE",
            "REQUEST_FED_INFO")


def ensure_bench_user(cluster: DevCluster) -> pwd.struct_passwd:
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        CommandRunner().run(["useradd", "--create-home", "--shell", "/bin/bash", USER])
        entry = pwd.getpwnam(USER)
    cluster.accounting.ensure_accounts([USER])  # the site's default account, normal QoS
    return entry


def one_mode(pace: bool, args: argparse.Namespace, work: Path, entry: pwd.struct_passwd,
             log: Path) -> dict:
    d = work / ("paced" if pace else "unpaced")
    d.mkdir()
    config = d / "exp.yaml"
    config.write_text(yaml.safe_dump({
        "name": "ratelimit-bench", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6},
                            "step_time": 1.0},
        "searcher": {"name": "random", "metric": "validation_loss",
                     "max_trials": args.trials, "max_concurrent_trials": args.trials,
                     "max_length": {"batches": 100000}},
        "max_restarts": 0, "reproducibility": {"experiment_seed": 5}}))
    out = d / "result.json"
    params = d / "args.json"
    params.write_text(json.dumps({
        "db": f"sqlite:///{d}/dethpc.db", "runs_root": str(d / "runs"), "config": str(config),
        "model_dir": str(TOY), "python": str(PYTHON), "timeout_s": args.seconds,
        "out": str(out), "blind": False, "sample_queue": False, "cpus_per_slot": 16,
        "pace": pace}))
    for root, dirs, files in os.walk(d):
        for name in [*dirs, *files, "."]:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)
    start = log.stat().st_size
    before, _ = sdiag()
    t0 = time.monotonic()
    site = next(p for p in sys.path if p.endswith("site-packages"))
    res = CommandRunner(timeout=args.seconds + 300, retries=0).run(
        ["runuser", "-u", USER, "--", "env", f"PYTHONPATH={REPO}:{site}", f"HOME={d}",
         str(PYTHON), str(DRIVER), str(params)], check=False)
    minutes = (time.monotonic() - t0) / 60
    after, _ = sdiag()
    CommandRunner(timeout=60).run(["scancel", "-u", USER], check=False)
    if res.returncode != 0:
        raise SystemExit(f"driver failed: {res.stderr[-3000:]}")
    result = json.loads(out.read_text())
    moved = delta(after, before)
    no = refused_rpcs(log, start, entry.pw_uid)
    daemon_ok = sum(v for k, v in moved.items() if k in CLIENT_RPCS and k not in JOB_RPCS)
    jobs_ok = sum(v for k, v in moved.items() if k in JOB_RPCS)
    daemon_no = [t for t in no if t not in JOB_RPCS]
    live = max((len(s.get("waiting", {})) for s in result["samples"]), default=0)
    return {
        "paced": pace, "minutes": round(minutes, 2), "live_trials": live,
        "ticks": len(result["samples"]),
        "daemon_accepted_per_min": round(daemon_ok / minutes, 2),
        "daemon_refused_per_min": round(len(daemon_no) / minutes, 2),
        "jobs_accepted_per_min": round(jobs_ok / minutes, 2),
        "jobs_refused_per_min": round((len(no) - len(daemon_no)) / minutes, 2),
        "site_refill_per_min": 6.0,
        "refused_by_type": {t: no.count(t) for t in sorted(set(no))},
        "accepted_by_type": {k: v for k, v in sorted(moved.items()) if k in CLIENT_RPCS},
        "pacer": result.get("pacer"), "state": result["state"],
        "errors": [e for e in result["events"] if e["kind"] == "error"][:5],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "ratelimit.json"))
    args = ap.parse_args()
    layout = lane_layout(1, release=SlurmRelease.V25_11)
    os.environ.update(lane_env(layout))
    cluster = DevCluster(layout)
    entry = ensure_bench_user(cluster)
    faults = ClusterFaults(cluster)
    log = layout.log_dir / "slurmctld.log"
    cells = []
    try:
        faults.restart_slurmctld(settings={"SlurmctldParameters": RATE_LIMIT})
        with tempfile.TemporaryDirectory(prefix="dethpc-bench-rl-") as tmp:
            os.chmod(tmp, 0o755)
            for pace in (True, False):
                cell = one_mode(pace, args, Path(tmp), entry, log)
                print(json.dumps(cell), flush=True)
                cells.append(cell)
    finally:
        faults.restore()
    Path(args.out).write_text(json.dumps({
        "bench": "ratelimit", "host": platform.node(), "cpus": os.cpu_count(),
        "slurm": CommandRunner().run(["scontrol", "--version"]).stdout.strip(),
        "rate_limit": RATE_LIMIT, "trials": args.trials, "seconds": args.seconds,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "cells": cells}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
