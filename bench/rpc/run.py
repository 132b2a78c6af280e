"""slurmctld RPCs per daemon tick, per trial and per user, read from ``sdiag``,
against a naive per-job polling loop over the same live jobs in the same run.

For each N (default 10, 100, 1000): submit an experiment of N toy trials (long
enough to stay alive) through the dethpc daemon on the real dev cluster, read
``sdiag`` before and after W steady-state ticks, then run W rounds of the naive
loop (one ``squeue -j <job>`` per live job, what a per-job poller does) and read
``sdiag`` again, then kill the experiment. Only RPC types a client causes are
counted (job/partition/node info, submit, cancel, update, requeue, build info,
fed info); the RPCs the running jobs cause themselves (step create, completion,
epilog) and sdiag's own are left out, so the two figures compare like with like.

Usage: python bench/rpc/run.py [--trials 10 100 1000] [--ticks 5] [--out bench/results/rpc.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dethpc.backends.slurm import SlurmBackend  # noqa: E402
from dethpc.common.runner import CommandRunner, RecordingRunner  # noqa: E402
from dethpc.config import load_experiment_config  # noqa: E402
from dethpc.config.model import ClusterConfig, ResourcePool  # noqa: E402
from dethpc.control import experiments  # noqa: E402
from dethpc.control.daemon import Daemon  # noqa: E402
from dethpc.store import Store  # noqa: E402
from dethpc.store.models import ExperimentState  # noqa: E402

CLIENT_RPCS = {
    "REQUEST_FED_INFO", "REQUEST_JOB_INFO", "REQUEST_JOB_INFO_SINGLE", "REQUEST_JOB_USER_INFO",
    "REQUEST_PARTITION_INFO", "REQUEST_NODE_INFO", "REQUEST_SUBMIT_BATCH_JOB",
    "REQUEST_SUBMIT_BATCH_HET_JOB", "REQUEST_KILL_JOB", "REQUEST_CANCEL_JOB",
    "REQUEST_UPDATE_JOB", "REQUEST_JOB_REQUEUE", "REQUEST_BUILD_INFO", "REQUEST_PING",
    "REQUEST_JOB_READY", "REQUEST_CONFIG", "REQUEST_RESERVATION_INFO",
}
TOY = REPO / "tests" / "fixtures" / "toy"
LINE = re.compile(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)")
USER = re.compile(r"^\s*(\S+)\s+\(\s*\d+\)\s+count:(\d+)")


def sdiag() -> tuple[dict[str, int], dict[str, int]]:
    out = CommandRunner().run(["sdiag"]).stdout
    by_type: dict[str, int] = {}
    by_user: dict[str, int] = {}
    section = None
    for line in out.splitlines():
        if "statistics by message type" in line:
            section = "type"
        elif "statistics by user" in line:
            section = "user"
        elif section == "type" and (m := LINE.match(line)):
            by_type[m.group(1)] = int(m.group(2))
        elif section == "user" and (m := USER.match(line)):
            by_user[m.group(1)] = int(m.group(2))
    return by_type, by_user


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def client(d: dict[str, int]) -> int:
    return sum(v for k, v in d.items() if k in CLIENT_RPCS)


class ConnectCounter:
    """TCP connects to slurmctld's port from this process and its children (the
    daemon's squeue/sacct), counted with ``strace -f -e connect``: every Slurm client
    RPC opens one, so this is the daemon's own RPC count, which other clients of a
    shared cluster cannot inflate (sdiag's counters are global). ``count`` is None
    without strace."""

    def __init__(self, work: Path) -> None:
        self.log = work / f"strace-{time.monotonic_ns()}.log"
        self.count: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ConnectCounter:
        if shutil.which("strace"):
            self.proc = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=connect", "-o",
                                          str(self.log), "-p", str(os.getpid())],
                                         stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while not self.log.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=30)
        port = slurmctld_port()
        self.count = len(re.findall(rf"htons\({port}\)", self.log.read_text()))


def slurmctld_port() -> int:
    out = CommandRunner().run(["scontrol", "show", "config"]).stdout
    m = re.search(r"^SlurmctldPort\s*=\s*(\d+)", out, re.M)
    return int(m.group(1)) if m else 6817


def measure_loop(daemon: Daemon, runner: RecordingRunner, ticks: int, work: Path) -> dict:
    """The real loop (``Daemon.run``) for ``ticks`` ticks: its sleeps, and between
    ticks the file-driven fast path (``metrics_poll_s``), which ingests the metrics
    files the running trials keep writing without polling Slurm. Client RPCs per tick
    must stay what one tick makes."""
    fast = {"ticks": 0, "seconds": 0.0}
    inner = daemon.fast_tick

    def counted(grown: dict[int, set[int]]) -> bool:
        t = time.monotonic()
        try:
            return inner(grown)
        finally:
            fast["ticks"] += 1
            fast["seconds"] += time.monotonic() - t

    daemon.fast_tick = counted  # type: ignore[method-assign]
    calls_before = len(runner.calls)
    s0, _ = sdiag()
    with ConnectCounter(work) as connects:
        t0 = time.monotonic()
        done = daemon.run(max_ticks=ticks)
        wall = time.monotonic() - t0
    s1, _ = sdiag()
    daemon.fast_tick = inner  # type: ignore[method-assign]
    cmds = runner.calls[calls_before:]
    d = delta(s1, s0)
    return {"ticks": done, "wall_s": round(wall, 2), "fast_ticks": fast["ticks"],
            "fast_tick_seconds": round(fast["seconds"], 3),
            "metrics_poll_s": daemon.cluster.metrics_poll_s,
            "commands_per_tick": len(cmds) / done,
            "commands": sorted({" ".join(c[:1]) for c in cmds}),
            "client_rpcs_per_tick": client(d) / done, "rpcs_by_type": d,
            "own_slurmctld_connects_per_tick": (None if connects.count is None
                                                else connects.count / done)}


def measure(n: int, ticks: int, work: Path) -> dict:
    cluster = ClusterConfig(backend="slurm", runs_root=work / f"runs-{n}", pools={
        "default": ResourcePool(name="default", partition="debug", signal_grace_s=30)})
    store = Store(f"sqlite:///{work}/db-{n}.sqlite")
    runner = RecordingRunner(timeout=120)
    backend = SlurmBackend(runner)
    cfg_path = work / f"c-{n}.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "name": f"rpc-{n}", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": 1.0, "step_time": 5.0},
        "searcher": {"name": "random", "metric": "validation_loss", "max_trials": n,
                     "max_concurrent_trials": n, "max_length": {"batches": 10000}},
    }))
    cfg = load_experiment_config(cfg_path)
    exp = experiments.create_experiment(store, cluster, cfg, TOY, backend)
    daemon = Daemon(store, cluster, backend)
    t0 = time.monotonic()
    daemon.tick()  # creates and submits all N trials
    submit_s = time.monotonic() - t0
    sbatch_calls = runner.count("sbatch")
    time.sleep(2)
    daemon.tick()
    # baseline: the same wall time with no polling at all (other clients, the jobs)
    b0, _ = sdiag()
    time.sleep(ticks * 1.05)
    b1, _ = sdiag()
    calls_before = len(runner.calls)
    s0, u0 = sdiag()
    with ConnectCounter(work) as tick_connects:
        for _ in range(ticks):
            daemon.tick()
            time.sleep(1)
    s1, u1 = sdiag()
    cmds = runner.calls[calls_before:]
    loop = measure_loop(daemon, runner, ticks, work)
    from sqlmodel import select

    from dethpc.store.models import Job

    with store.session() as s:
        refs = [j.ref for j in s.exec(select(Job).where(Job.experiment_id == exp)) if j.ref]
    naive = CommandRunner(timeout=60)
    t1 = time.monotonic()
    for _ in range(ticks):
        for ref in refs:
            naive.run(["squeue", "-h", "-j", ref, "-o", "%T"], check=False)
    naive_s = time.monotonic() - t1
    s2, u2 = sdiag()
    experiments.request_state(store, exp, "kill")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        daemon.tick()
        if ExperimentState(experiments.get_experiment(store, exp).state).is_terminal:
            break
        time.sleep(1)
    d_daemon, d_naive, d_base = delta(s1, s0), delta(s2, s1), delta(b1, b0)
    return {
        "trials": n, "ticks": ticks, "sbatch_calls_to_launch": sbatch_calls,
        "submit_seconds": round(submit_s, 3),
        "daemon": {
            "commands_per_tick": len(cmds) / ticks,
            "commands": sorted({" ".join(c[:1]) for c in cmds}),
            "client_rpcs_per_tick": client(d_daemon) / ticks,
            "client_rpcs_per_trial_per_tick": client(d_daemon) / ticks / n,
            "rpcs_by_type": d_daemon, "rpcs_by_user": delta(u1, u0),
            "own_slurmctld_connects_per_tick": (None if tick_connects.count is None
                                                else tick_connects.count / ticks),
        },
        "daemon_loop": loop,
        "naive_per_job_polling": {
            "commands_per_tick": len(refs), "seconds_per_tick": round(naive_s / ticks, 3),
            "client_rpcs_per_tick": client(d_naive) / ticks,
            "client_rpcs_per_trial_per_tick": client(d_naive) / ticks / n,
            "rpcs_by_type": d_naive, "rpcs_by_user": delta(u2, u1),
        },
        "baseline_idle": {"client_rpcs_per_tick_interval": client(d_base) / ticks,
                          "rpcs_by_type": d_base},
        "ratio_naive_over_daemon": round(client(d_naive) / max(1, client(d_daemon)), 1),
        "quiet": quiet(d_base, d_daemon, loop["rpcs_by_type"]),
    }


def quiet(*deltas: dict[str, int]) -> bool:
    """No other client spoke to slurmctld while this was measured (the idle baseline
    saw no client RPC) and slurmctld was not restarted (a restart resets the counters:
    negative deltas). On a shared dev cluster a run that is not quiet counts other
    clients' RPCs too; the daemon's own commands (``commands_per_tick``) still hold."""
    return client(deltas[0]) == 0 and all(v >= 0 for d in deltas for v in d.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--ticks", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "rpc.json"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dethpc-rpc-"))
    results = []
    for n in args.trials:
        r = measure(n, args.ticks, work)
        print(json.dumps({k: v for k, v in r.items() if k != "daemon" and
                          k != "naive_per_job_polling"}),
              "daemon rpcs/tick", r["daemon"]["client_rpcs_per_tick"],
              "loop rpcs/tick", r["daemon_loop"]["client_rpcs_per_tick"],
              "own connects/tick", r["daemon"]["own_slurmctld_connects_per_tick"],
              r["daemon_loop"]["own_slurmctld_connects_per_tick"],
              "fast ticks", r["daemon_loop"]["fast_ticks"],
              "naive rpcs/tick", r["naive_per_job_polling"]["client_rpcs_per_tick"], flush=True)
        results.append(r)
    out = {"benchmark": "rpc", "host": platform.node(), "time": time.time(),
           "slurm": CommandRunner().run(["sinfo", "-V"]).stdout.strip(),
           "note": "dev cluster: 4 slurmd on one host; client RPC types only",
           "pid": os.getpid(), "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
