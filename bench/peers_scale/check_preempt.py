"""A real check of the fault injector's preemption on the scale cluster (issue 48): one
preemption through ``FaultInjector``'s own code against a busy node, as the first full
run's refused ones met it: a low job of ``dethpc-bg1`` that was preempted once before,
restarted on the node and crossed a slurmctld restart, and a stream of short low array
tasks of ``dethpc-bench`` that ignore SIGTERM (as submitit's do: each dies at GraceTime's
SIGKILL) keeping the node busy. It asserts that the preemptor starts within the
injector's wait (not refused, not cut short), that the injector reserved the node and
released the reservation, and that the low jobs running on the node were preempted
through Slurm's preemption (sacct: PREEMPTED, then requeued) -- the same fault the
systems met before the reservation.

Run as root, holding the scale cluster's lock::

    flock /tmp/peers_scale.lock .venv/bin/python -m bench.peers_scale.check_preempt

Prints one JSON object (``--out`` writes it too); exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.peers_scale import faults as flt
from dethpc.devcluster.profiles import BACKGROUND_USERS, SYSTEM_USER

SCALE_CONF = "/etc/slurm-scale/slurm.conf"


def run(argv: list[str], env: dict[str, str], user: str | None = None) -> str:
    res = subprocess.run(flt.as_user(user, argv) if user else argv, capture_output=True,
                         text=True, env=env, check=False, timeout=60, cwd="/tmp")
    if res.returncode != 0:
        raise RuntimeError(f"{argv[:3]}: {res.stderr.strip()[:500]}")
    return res.stdout


def sbatch(env: dict[str, str], user: str, *args: str) -> str:
    return run(["sbatch", "--parsable", "-o", "/dev/null", *args], env, user).strip() \
        .split(";")[0]


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.5)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


def show(env: dict[str, str], job: str) -> dict[str, str]:
    rows = flt.parse_show_jobs(run(["scontrol", "show", "job", "-o", job], env,
                                   flt.FAULT_USER))
    return rows[0] if rows else {}


def squeue(env: dict[str, str], *args: str) -> list[str]:
    return run(["squeue", "-h", *args], env, flt.FAULT_USER).split()


def sacct_states(env: dict[str, str], jobs: list[str]) -> dict[str, list[str]]:
    """Every record (``-D``: requeued runs too) of ``jobs``: JobID -> states in order."""
    out: dict[str, list[str]] = {}
    text = run(["sacct", "-n", "-P", "-D", "-X", "-j", ",".join(jobs), "-o", "JobID,State"],
               env)
    for line in text.splitlines():
        job, _, state = line.partition("|")
        out.setdefault(job, []).append(state.split()[0] if state else "")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--node", default="g15")
    ap.add_argument("--hold", type=float, default=30.0, help="the preemption's hold, s")
    ap.add_argument("--no-ctld-restart", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    env = {**os.environ, "SLURM_CONF": SCALE_CONF}
    node, bg_user = args.node, BACKGROUND_USERS[0]
    result: dict[str, Any] = {"node": node, "hold_s": args.hold}
    jobs: list[str] = []
    injector: flt.FaultInjector | None = None
    failures: list[str] = []
    try:
        # (a) a low job preempted once, restarted on the node, across a slurmctld restart
        bg = sbatch(env, bg_user, "-p", "low", "-w", node, "-n1", "-t", "30",
                    "-J", "check-bg", "--wrap", "sleep 1200")
        jobs.append(bg)
        wait_for(lambda: show(env, bg).get("JobState") == "RUNNING", 60, "bg running")
        first = sbatch(env, flt.FAULT_USER, "-p", "high", "-w", node, "--exclusive",
                       "-t", "5", "-J", "check-first", "--wrap", "sleep 300")
        jobs.append(first)
        wait_for(lambda: show(env, first).get("JobState") == "RUNNING", 90,
                 "the first preemptor running")
        run(["scancel", first], env, flt.FAULT_USER)
        wait_for(lambda: show(env, bg).get("JobState") == "RUNNING"
                 and int(show(env, bg).get("Restarts", "0")) >= 1, 180,
                 "bg restarted after its preemption")
        if not args.no_ctld_restart:
            from dethpc.devcluster.cluster import DevCluster
            from dethpc.devcluster.faults import ClusterFaults
            from dethpc.devcluster.profiles import saved_spec, scale_layout
            timing = ClusterFaults(DevCluster(scale_layout(saved_spec())),
                                   timeout=120.0).restart_slurmctld()
            result["ctld_restart_s"] = round(timing.stop_s + timing.start_s, 1)
        result["bg_before"] = show(env, bg)
        bg_preempted = sacct_states(env, [bg]).get(bg, []).count("PREEMPTED")
        # (b) the stream: SIGTERM-ignoring 13 s low tasks on the node, 12 at a time
        arr = sbatch(env, SYSTEM_USER, "-p", "low", "-w", node, "-n1", "-t", "10",
                     "--array=0-999%12", "-J", "check-stream",
                     "--wrap", 'trap "" TERM; sleep 13')
        jobs.append(arr)
        # the stream is a stream once its second wave runs (a task past the first 12)
        wait_for(lambda: any(int(t.split("_")[1]) >= 12 for t in squeue(
            env, "-j", arr, "-t", "RUNNING", "-o", "%i") if "_" in t), 120,
            "the stream's second wave")
        # (c) the preemption, through the injector's own code
        ev = flt.FaultEvent(0.0, flt.FaultKind.PREEMPT, (node,), args.hold)
        injector = flt.FaultInjector([ev], None, lambda: None, env, say=print)
        t0 = time.time()
        injector.start(t0)
        wait_for(lambda: injector is not None and injector.outcomes,
                 injector.start_timeout_s + 60, "the preemption's outcome")
        out = injector.outcomes[0]
        resv = out.get("reservation")
        held = run(["scontrol", "show", "reservation", resv], env) if resv else ""
        result["outcome"] = {k: v for k, v in out.items() if k != "squeue"}
        result["reservation_held"] = held.split("\n")[0] if held else None
        exposed = [r["job"] for r in out.get("exposed", [])]
        # the exposed jobs' runs end PREEMPTED (SIGKILL at GraceTime) and they are
        # requeued; the bg job's second preemption is a second PREEMPTED record
        def preempted() -> bool:
            got = sacct_states(env, exposed)
            return all(got.get(j, []).count("PREEMPTED") > (bg_preempted if j == bg else 0)
                       for j in exposed)
        try:
            wait_for(preempted, 60, "sacct: every exposed job PREEMPTED once more")
        except TimeoutError as exc:
            failures.append(str(exc))
        result["exposed_sacct"] = sacct_states(env, exposed)
        result["bg_after"] = show(env, bg)
        # the hold ends: the injector deletes its reservation by itself
        try:
            wait_for(lambda: not resv or resv not in run(
                ["scontrol", "show", "reservation"], env), args.hold + 30,
                "the reservation released at the hold's end")
            result["released_after_s"] = round(time.time() - t0, 1)
        except TimeoutError as exc:
            failures.append(str(exc))
        if out.get("refused") or out.get("cut_short"):
            failures.append(f"the preemption was not carried out: {out.get('what')}")
        if not resv:
            failures.append(f"no reservation: {out.get('reservation_error')}")
        if bg not in exposed:
            failures.append(f"the restarted bg job {bg} was not on the node at the fault")
        if not any(j.startswith(arr + "_") for j in exposed):
            failures.append("no stream task was on the node at the fault")
    finally:
        if injector is not None:
            injector.stop()
        for job in jobs:
            subprocess.run(["scancel", job], env=env, check=False, capture_output=True)
    left = run(["scontrol", "show", "reservation"], env)
    result["reservations_left"] = [ln.split()[0] for ln in left.splitlines()
                                   if flt.RESV_PREFIX in ln]
    if result["reservations_left"]:
        failures.append(f"reservations left: {result['reservations_left']}")
    result["failures"] = failures
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
