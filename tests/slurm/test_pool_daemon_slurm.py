"""The worker pool driven by a real daemon on the dev cluster (issue 16 item 1).

One ``adaptive_asha`` experiment (promotion variant: every promotion is a new run of
the trial) with ``slurm.workers`` runs in an array of 2 long-lived workers on the
preemptible ``low`` partition, under a real ``dethpc daemon run``, and suffers:

1. a worker preempted mid-trial by a ``high`` job (``--signal=B:USR2``): the trial
   checkpoints and exits 80, the worker hands its lease back and requeues its own array
   task; the trial resumes from its checkpoint on whichever worker claims it;
2. the daemon SIGKILLed just after, and started again;
3. the node under a worker crashed (every process of it SIGKILLed, the node DOWN):
   the worker's lease is no longer renewed, and the daemon's next poll sees the worker's
   job no longer running (requeued or ended) and hands the lease back then, well before
   ``lease_timeout_s`` (set to 600 s here, past the test's 120 s wait, so that the
   expiry cannot be what hands it back); the trial resumes on the other worker, counted
   as a restart (a run that left no exit record), as a node failure under a per-trial
   job is.

Afterwards: the experiment COMPLETED; every trial run (work item) has one exit
record per attempt except the crashed one, attempts contiguous, the last one
completed or stopped; preempted runs are free, the crashed one counted; promotions
ran as items in live workers: fewer worker tasks were submitted than runs, and no
Slurm job was submitted per trial run (sacct lists only the worker arrays).
Wall time: printed (about 60-100 s on the 2-core dev machine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from sqlmodel import select

from dethpc.common import worker_queue as queue
from dethpc.control.worker_pool_view import parse_item_ref
from dethpc.store import Store
from dethpc.store.models import Batch, BatchKind, Experiment, Job, Trial
from tests.slurm.fixtures.harness import (
    GRACE_S,
    crash_node,
    preempt,
    read_jsonl,
    revive_node,
    wait_until,
)

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "tests" / "fixtures" / "toy"
#: past the crash's 120 s wait: the lease must come back through the poll's answer
LEASE_TIMEOUT_S = 600


class PoolRun:
    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.home.mkdir(parents=True)
        self.home.chmod(0o755)
        (self.home / "cluster.yaml").write_text(yaml.safe_dump({
            "backend": "slurm", "runs_root": str(self.home / "runs"),
            "default_pool": "low", "python": sys.executable,
            "tick_min_s": 0.2, "tick_max_s": 1.0, "daemon_lease_s": 10,
            "pools": {"low": {"partition": "low", "preemptible": True, "signal": "USR2",
                              "signal_grace_s": GRACE_S, "cpus_per_slot": 1}}}))
        self.env = {**os.environ, "DETHPC_HOME": str(self.home),
                    "DETHPC_CLUSTER_CONFIG": str(self.home / "cluster.yaml")}
        self.env.pop("DETHPC_FAULT_POINT", None)
        self.store = Store(f"sqlite:///{self.home / 'dethpc.db'}")
        self.daemon: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.exp_id = 0

    def cli(self, *args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *args],
                              capture_output=True, text=True, env=self.env, timeout=300)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc.stdout

    def submit(self) -> None:
        cfg = self.home / "experiment.yaml"
        cfg.write_text(yaml.safe_dump({
            "name": "pool", "entrypoint": "python3 train.py",
            "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6},
                                "step_time": 0.4},
            "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                         "max_trials": 6, "max_concurrent_trials": 2, "divisor": 3,
                         "max_rungs": 3, "max_length": {"batches": 18},
                         "variant": "promotion", "stop_grace_s": 120},
            "max_restarts": 2,
            "reproducibility": {"experiment_seed": 16},
            "slurm": {"workers": {"preload": ["dethpc.core"], "heartbeat_s": 1,
                                  "lease_timeout_s": LEASE_TIMEOUT_S}},
        }))
        self.exp_id = int(json.loads(self.cli("submit", str(cfg), str(TOY), "--no-daemon",
                                              "--json"))["id"])

    def start_daemon(self) -> None:
        log = (self.home / f"daemon-{self.starts}.log").open("wb")
        self.daemon = subprocess.Popen([sys.executable, "-m", "dethpc.surfaces.cli.main", "daemon",
                                        "run"], stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=log, env=self.env)
        self.starts += 1

    def stop_daemon(self, sig: int = signal.SIGTERM) -> None:
        if self.daemon is not None:
            self.daemon.send_signal(sig)
            self.daemon.wait(timeout=60)
            self.daemon = None

    @property
    def run_dir(self) -> Path:
        with self.store.session() as s:
            exp = s.get(Experiment, self.exp_id)
            assert exp is not None
            return Path(exp.run_dir)

    @property
    def pool(self) -> queue.WorkerPoolPaths:
        return queue.WorkerPoolPaths.of_run_dir(self.run_dir)

    def state(self) -> str:
        with self.store.session() as s:
            exp = s.get(Experiment, self.exp_id)
            assert exp is not None
            return str(exp.state)

    def busy_worker(self, exclude: set[int] = frozenset()) -> tuple[str, int] | None:
        """(the Slurm ref of a worker whose trial has trained a step, the trial)."""
        for name in queue.active_leases(self.pool):
            worker, _, item = name.partition(queue.LEASE_SEP)
            trial = int(item.split("-")[0][1:])
            if trial in exclude or not worker.startswith("j"):
                continue
            if read_jsonl(self.run_dir / "trials" / str(trial) / "metrics.jsonl"):
                return worker[1:].rsplit(".", 1)[0], trial
        return None

    def scancel_all(self) -> None:
        with self.store.session() as s:
            ids = sorted({b.array_job_id for b in s.exec(select(Batch)) if b.array_job_id})
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, check=False)


def _squeue(ref: str, fmt: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", ref, "-o", fmt], capture_output=True,
                          text=True, timeout=60).stdout.strip()


def test_pool_asha_survives_preemption_a_node_crash_and_a_daemon_kill(
        tmp_path: Path, slurm_cluster: Any) -> None:
    t0 = time.monotonic()
    run = PoolRun(tmp_path)
    run.submit()
    run.start_daemon()
    crashed: str | None = None
    try:
        # 1. a worker preempted while its trial trains
        ref, preempted = wait_until("a worker training a trial", run.busy_worker,
                                    timeout=240, interval=0.2)
        exits = run.run_dir / "trials" / str(preempted) / "exits.jsonl"
        preempt(ref, lambda: any(r["reason"] == "preempted" for r in read_jsonl(exits)))
        print(f"preempted worker {ref} running trial {preempted} "
              f"({time.monotonic() - t0:.0f} s)")
        # 2. the daemon SIGKILLed, then started again
        run.stop_daemon(signal.SIGKILL)
        run.start_daemon()
        # 3. the node under another worker crashes
        ref2, lost = wait_until("a worker training another trial",
                                lambda: run.busy_worker(exclude={preempted}),
                                timeout=240, interval=0.2)
        node = _squeue(ref2, "%N")
        assert node, f"worker {ref2} is not running"
        crashed = node
        crash = crash_node(node)
        print(f"crashed {node} under worker {ref2} (trial {lost}; "
              f"{len(crash.killed)} processes killed)")
        wait_until(f"trial {lost}'s lease to be handed back", lambda: not any(
            n.startswith(f"j{ref2}.") for n in queue.active_leases(run.pool)), timeout=120)
        revive_node(node)
        crashed = None
        wait_until("the experiment to end", lambda: run.state() in (
            "COMPLETED", "ERROR", "CANCELED"), timeout=400, interval=0.5)
    finally:
        run.stop_daemon()
        if crashed is not None:
            revive_node(crashed)
        run.scancel_all()
    print(f"pool run wall time: {time.monotonic() - t0:.1f} s")
    assert run.state() == "COMPLETED", (run.home / "daemon-1.log").read_text()[-3000:]

    with run.store.session() as s:
        jobs = list(s.exec(select(Job).where(Job.experiment_id == run.exp_id)))
        trials = {t.id: t for t in s.exec(select(Trial).where(
            Trial.experiment_id == run.exp_id))}
        batches = list(s.exec(select(Batch).where(Batch.experiment_id == run.exp_id)))
    assert all(j.ref and parse_item_ref(j.ref) for j in jobs), [j.ref for j in jobs]
    worker_arrays = [b for b in batches if b.kind == BatchKind.WORKERS and b.array_job_id]
    worker_tasks = sum(b.size for b in worker_arrays)
    promotions = [j for j in jobs if parse_item_ref(j.ref or "")[1].endswith(("-s1", "-s2"))]
    print(f"{len(trials)} trials, {len(jobs)} runs ({len(promotions)} promotions), "
          f"{len(worker_arrays)} worker array(s) of {worker_tasks} task(s)")
    assert promotions, "ASHA promoted nothing"
    assert worker_tasks < len(jobs), (worker_tasks, len(jobs))
    # each run: one exit record per attempt, except the crashed attempt; the last ends it
    free = counted = 0
    for job in jobs:
        recs = [r for r in read_jsonl(run.run_dir / "trials" / str(job.trial_id)
                                      / "exits.jsonl") if r["job"] == job.ref]
        attempts = [r["restart"] for r in recs]
        assert attempts == sorted(set(attempts)), (job.ref, recs)
        assert recs and recs[-1]["reason"] in ("completed", "stopped"), (job.ref, recs)
        assert recs[-1]["restart"] == job.restart_count, (job.ref, recs, job.restart_count)
        free += sum(r["reason"] == "preempted" for r in recs)
        counted += job.restart_count + 1 - len(recs)      # attempts without a record
    assert free >= 1, "no run was preempted"
    assert counted >= 1, "no run lost its worker to the node crash"
    assert sum(t.restarts for t in trials.values()) == counted
    # no Slurm job per run: sacct knows only the worker arrays
    ids = sorted({b.array_job_id for b in worker_arrays if b.array_job_id})
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,JobName", "-S", "now-1hour",
                          "--name", ",".join(b.name for b in worker_arrays)],
                         capture_output=True, text=True, timeout=60).stdout
    arrays = {line.split("|")[0].split("_")[0] for line in out.splitlines() if line}
    assert arrays <= set(ids), (arrays, ids)
