"""Preemption benchmark: steps lost per preemption and seconds from signal to checkpoint.

Runs the preemption fixture trial (tests/slurm/fixtures/preempt_trial) through an
in-process dethpc daemon, with ``ballast_mb`` of model state per checkpoint size,
and preempts it ``--reps`` times per size:

* ``--backend slurm`` (default when the dev cluster answers): the trial runs on the
  preemptible ``low`` partition; each preemption is a real ``high`` job pinned to
  the trial's node that needs the trial's CPUs (``-w <node> -c <idle + 1>``). Slurm sends
  USR2 (``preempt_send_user_signal``), the trial checkpoints, is requeued, resumes.
* ``--backend local`` (when no cluster is reachable; the JSON says so): the local
  backend's ``cancel(signal=USR2)`` (its ``scancel --signal``) signals the batch
  shell, which forwards it; the job requeues itself (exit 85) and resumes.

Per preemption it records (all on this host's clock):
  issue_to_signal_s   preemptor submitted -> the training process got the signal
  signal_to_commit_s  signal -> checkpoint committed (metadata.json "time", just before rename)
  signal_to_exit_s    signal -> the training process exited (80)
  steps_lost          batches finished before the exit - batch the next run resumed at
                      (goal 0: the batch in flight finishes, then it is checkpointed)
  checkpoint_bytes    size of the checkpoint written on the signal
Writes bench/results/preemption.json (parameters, raw numbers, summary).

Usage: python bench/preemption/run.py [--sizes-mb 1 10 100] [--reps 3] [--backend auto]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.slurm.fixtures.harness import (  # noqa: E402
    DaemonHarness,
    checkpoints,
    experiment_yaml,
    preempt,
    read_jsonl,
    steps_log,
)

STEP_TIME_S = 0.05
PREEMPTOR = {
    "slurm": "sbatch -p high -w <node> -c <idle CPUs + the trial's> (low: GraceTime=10)",
    "local": "LocalBackend.cancel(ref, signal=USR2) (batch shell forwards it)",
}


def slurm_up() -> bool:
    try:
        out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return " is UP" in out.stdout


def trained_in_run(trial_dir: Path, run: int) -> int:
    return sum(1 for r, _ in steps_log(trial_dir) if r == run)


def preempt_once(h: DaemonHarness, ref: str, backend: str, trial_dir: Path,
                 rep: int) -> tuple[list[str], float]:
    """Preempt the trial's job once; returns the preemptors' job ids (Slurm) and when
    the one that preempted it was submitted."""
    if backend == "local":
        issued = time.time()
        h.backend.cancel([ref], signal="USR2")
        return [], issued
    times: list[float] = []
    ids = preempt(ref, lambda: len(read_jsonl(trial_dir / "runs.jsonl")) > rep,
                  submitted_at=times)
    return ids, times[-1]


def bench_size(root: Path, backend: str, size_mb: float, reps: int) -> list[dict[str, Any]]:
    h = DaemonHarness.create(root, backend=backend)
    pool = "low" if backend == "slurm" else "debug"
    exp = h.submit(experiment_yaml(batches=1_000_000, pool=pool, checkpoint_period=1_000_000,
                                   hparams={"step_time": STEP_TIME_S, "ballast_mb": size_mb}))
    rows: list[dict[str, Any]] = []
    try:
        ref = h.wait("the trial's job", lambda: h.job_ref(exp), timeout=120)
        trial_dir, ckpt_dir = h.trial_dir(exp), h.ckpt_dir(exp)
        for rep in range(reps):
            h.wait(f"run {rep} to train", lambda r=rep: trained_in_run(trial_dir, r) >= 20,
                   timeout=900)
            preemptors, issued = preempt_once(h, ref, backend, trial_dir, rep)
            runs = h.wait(f"run {rep} to checkpoint and exit",
                          lambda r=rep: (read_jsonl(trial_dir / "runs.jsonl")
                                         if len(read_jsonl(trial_dir / "runs.jsonl")) > r
                                         else None), timeout=300)
            h.wait(f"run {rep + 1} to start", lambda r=rep: trained_in_run(trial_dir, r + 1) >= 1,
                   timeout=600)
            run, nxt = runs[rep], _first_batch_of(trial_dir, rep + 1)
            ck = [c for c in checkpoints(ckpt_dir) if c["steps_completed"] == run["batches_done"]]
            size = sum((ckpt_dir / ck[-1]["uuid"] / f).stat().st_size
                       for f in ck[-1]["files"]) if ck else None
            sig = run["signal_at"]
            rows.append({
                "size_mb": size_mb, "rep": rep, "preemptors": preemptors,
                "issue_to_signal_s": round(sig - issued, 3) if sig else None,
                "signal_to_commit_s": round(ck[-1]["time"] - sig, 3) if ck and sig else None,
                "signal_to_exit_s": round(run["exit_at"] - sig, 3) if sig else None,
                "batches_done": run["batches_done"], "resumed_at": nxt,
                "steps_lost": run["batches_done"] - nxt,
                "checkpoint_bytes": size,
            })
            print(json.dumps(rows[-1]), flush=True)
    finally:
        h.cancel_all_experiments()
    return rows


def _first_batch_of(trial_dir: Path, run: int) -> int:
    steps = [s for r, s in steps_log(trial_dir) if r == run]
    return min(steps) - 1  # steps.log holds batches *done*: the first line is first_batch + 1


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in sorted({r["size_mb"] for r in rows}):
        sel = [r for r in rows if r["size_mb"] == size]
        mb = round((sel[0]["checkpoint_bytes"] or 0) / 2**20, 2)
        stats: dict[str, Any] = {"n": len(sel), "checkpoint_mb": mb,
                                 "steps_lost_max": max(r["steps_lost"] for r in sel)}
        for key in ("issue_to_signal_s", "signal_to_commit_s", "signal_to_exit_s"):
            vals = [r[key] for r in sel if r[key] is not None]
            if vals:
                stats[key] = {"median": round(statistics.median(vals), 3),
                              "max": round(max(vals), 3), "min": round(min(vals), 3)}
        out[f"{size:g}MB"] = stats
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 10, 100])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--backend", choices=["auto", "slurm", "local"], default="auto")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "preemption.json")
    args = parser.parse_args()
    backend = args.backend
    note = ""
    if backend == "auto":
        backend = "slurm" if slurm_up() else "local"
        if backend == "local":
            note = "no Slurm cluster answered `scontrol ping`: measured on the local backend"
    rows: list[dict[str, Any]] = []
    started = time.time()
    tmp = tempfile.mkdtemp(prefix="dethpc-bench-preempt-")
    try:
        for size in args.sizes_mb:
            rows += bench_size(Path(tmp) / f"s{size:g}", backend, size, args.reps)
    finally:
        # cancelled jobs may still be writing there for a moment
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "benchmark": "preemption", "backend": backend, "note": note,
        "parameters": {"sizes_mb": args.sizes_mb, "reps": args.reps,
                       "step_time_s": STEP_TIME_S, "signal": "USR2",
                       "preemptor": PREEMPTOR[backend]},
        "host": {"python": platform.python_version(), "machine": platform.machine(),
                 "cpus": os.cpu_count()},
        "started": started, "wall_s": round(time.time() - started, 1),
        "summary": summary(rows), "raw": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
