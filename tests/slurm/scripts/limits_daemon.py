"""Run one experiment through an in-process dethpc daemon AS THE CALLING USER, recording
after every tick what Slurm itself lists of the user's jobs; for tests/slurm/test_limits_slurm.py
(run with ``runuser -u dethpc-user``: root may be exempt from per-user limits).

Usage: limits_daemon.py ARGS.json. ARGS: db (store URL), runs_root, config (experiment
YAML), model_dir, python (the interpreter jobs use), timeout_s, out (where the result JSON
goes), blind (true: the backend does not read the limits, so only sbatch refusals stop it),
sample_queue (default true; false: no squeue of the driver's own between ticks, so that
only the daemon's commands reach slurmctld), cpus_per_slot (default 1), pace (default
true; false: the backend never paces its Slurm commands, bench/rpc/ratelimit.py's
baseline).
The result: final state, one sample per tick, the trials as ``describe`` shows them, the
events, every command the backend ran, and what its RPC pacer did.
"""

from __future__ import annotations

import getpass
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from dethpc.backends.base import UNLIMITED, PoolLimits
from dethpc.backends.slurm import SlurmBackend
from dethpc.common.runner import CommandRunner, RecordingRunner
from dethpc.config import load_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control import experiments
from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.store.models import ExperimentState
from dethpc.surfaces.views import describe_experiment, events_of


class BlindBackend(SlurmBackend):
    """A Slurm backend that does not know the user's limits (as on a site whose limit
    dethpc cannot read): only Slurm's refusals hold it back."""

    def job_limits(self, partition: str | None, qos: str | None, account: str | None,
                   extra_args: Sequence[str] = ()) -> PoolLimits:
        return UNLIMITED


def user_queue(user: str) -> list[str]:
    """What Slurm lists of the user's pending/running/suspended jobs, one line per task."""
    out = CommandRunner(timeout=30.0).run(
        ["squeue", "-h", "-r", "-u", user, "-t", "PD,R,S,CG", "-o", "%i|%T|%r|%q"]).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def main(args: dict) -> dict:
    user = getpass.getuser()
    cluster = ClusterConfig(
        backend="slurm", runs_root=Path(args["runs_root"]),
        pools={"default": ResourcePool(name="default", partition="debug",
                                       cpus_per_slot=int(args.get("cpus_per_slot", 1)),
                                       signal_grace_s=30)},
        tick_min_s=0.2, tick_max_s=1.0, python=args["python"])
    store = Store(args["db"])
    runner = RecordingRunner(timeout=30.0)
    backend = (BlindBackend if args.get("blind") else SlurmBackend)(runner, user=user)
    if args.get("pace") is False:  # bench/rpc/ratelimit.py's baseline: no RPC pacing
        backend._pace_known = True
    cfg = load_experiment_config(args["config"])
    exp = experiments.create_experiment(store, cluster, cfg, Path(args["model_dir"]), backend)
    daemon = Daemon(store, cluster, backend)
    samples: list[dict] = []
    started = time.monotonic()
    deadline = started + float(args["timeout_s"])
    state = ""
    while time.monotonic() < deadline:
        before = len(runner.calls)
        stats = daemon.tick()
        queue = user_queue(user) if args.get("sample_queue", True) else []
        d = describe_experiment(store, exp)
        samples.append({"jobs": queue, "errors": stats.errors, "submitted": stats.submitted,
                        "commands": [list(c) for c in runner.calls[before:]],
                        "waiting": {t["id"]: t["pending_reason"] for t in d["trials"]}})
        if args.get("release"):
            Path(args["release"]).touch()
        state = d["state"]
        if ExperimentState(state).is_terminal:
            break
        time.sleep(0.3)
    d = describe_experiment(store, exp)
    pacer = backend.pacer
    return {"user": user, "state": d["state"], "message": d["message"], "trials": d["trials"],
            "events": events_of(store, exp), "samples": samples,
            "calls": [list(c) for c in runner.calls], "seconds": time.monotonic() - started,
            "pacer": {"limit": None if pacer.limit is None else vars(pacer.limit),
                      "waits": pacer.waits, "waited_s": pacer.waited_s, "rpcs": pacer.rpcs}}


if __name__ == "__main__":
    params = json.loads(Path(sys.argv[1]).read_text())
    result = main(params)
    Path(params["out"]).write_text(json.dumps(result, indent=1, default=str))
