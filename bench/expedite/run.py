"""How long a job waits after its node fails: ``--requeue`` against ``--requeue=expedite``
(Slurm 25.11), on the 25.11 dev cluster. Also: what an expedited requeue does after a
run that exits non-zero (held), and how long the release takes to start it again.

For each mode and sample: a 1-node job (``sleep``) on ``debug``; once RUNNING, its node
is crashed (every process killed, then DOWN: ``dethpc.devcluster.nodes.crash_node``)
and the time until the same job id is RUNNING again (on another node, ``Restarts=1``)
is taken from ``squeue`` polled every 0.2 s; the node is revived before the next sample.
The dev cluster's ``cred_expire`` is 10 s (sites: 120 s by default), which is the
``requeue_delay`` a normal requeue waits. Writes bench/results/expedite.json.

    DETHPC_DEVCLUSTER_SLURM=25.11 .venv/bin/python bench/expedite/run.py --samples 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from dethpc.devcluster import nodes
from dethpc.devcluster.cluster import DevCluster
from dethpc.devcluster.lanes import current_release

OUT = Path(__file__).resolve().parents[1] / "results" / "expedite.json"


def sh(cluster: DevCluster, *argv: str) -> str:
    return cluster.runner.run(list(argv), check=False, retry=False, timeout=30).stdout


def state(cluster: DevCluster, job: str) -> tuple[str, str, str]:
    """(state, node list, restarts) of ``job``."""
    out = sh(cluster, "scontrol", "-o", "show", "job", job)
    f = dict(w.split("=", 1) for w in out.split() if "=" in w)
    return f.get("JobState", ""), f.get("NodeList", ""), f.get("Restarts", "")


def wait_for(what: str, fn: Any, timeout: float = 300.0, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(every)
    raise TimeoutError(what)


def node_failure(cluster: DevCluster, option: str, cwd: Path) -> dict[str, Any]:
    job = sh(cluster, "sbatch", "--parsable", option, "-p", "debug", "-N1", "-n1",
             f"--chdir={cwd}", "--wrap", "sleep 600").strip()
    try:
        _, node, _ = wait_for("RUNNING", lambda: (s := state(cluster, job))[0] == "RUNNING"
                              and s)
        t0 = time.monotonic()
        nodes.crash_node(cluster, node, reason="bench/expedite")
        seen: list[str] = []

        def again() -> tuple[str, str, str] | None:
            s = state(cluster, job)
            if not seen or seen[-1] != s[0]:
                seen.append(s[0])
            return s if s[0] == "RUNNING" and s[2] == "1" else None

        _, node2, _ = wait_for("RUNNING again", again)
        return {"job": job, "option": option, "crashed": node, "ran_again_on": node2,
                "seconds": round(time.monotonic() - t0, 2), "states": seen}
    finally:
        sh(cluster, "scancel", job)
        if "node" in locals():
            nodes.revive_node(cluster, node)


def failed_run(cluster: DevCluster, cwd: Path) -> dict[str, Any]:
    """An expedited job whose script exits 3: held; released; how soon it runs again."""
    job = sh(cluster, "sbatch", "--parsable", "--requeue=expedite", "-p", "debug", "-N1",
             f"--chdir={cwd}", "--wrap",
             'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then exit 3; fi; sleep 600').strip()
    try:
        held = wait_for("held", lambda: (s := state(cluster, job))[0] == "REQUEUE_HOLD" and s)
        reason = sh(cluster, "squeue", "-h", "-j", job, "-o", "%r").strip()
        t0 = time.monotonic()
        sh(cluster, "scontrol", "release", job)
        wait_for("RUNNING after the release", lambda: state(cluster, job)[0] == "RUNNING")
        return {"job": job, "held_state": held[0], "reason": reason, "restarts": held[2],
                "release_to_running_s": round(time.monotonic() - t0, 2)}
    finally:
        sh(cluster, "scancel", job)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    cluster = DevCluster()
    cwd = Path("/tmp/bench-expedite")
    cwd.mkdir(exist_ok=True)
    cwd.chmod(0o777)
    runs = [node_failure(cluster, option, cwd)
            for _ in range(a.samples) for option in ("--requeue", "--requeue=expedite")]
    summary = {option: statistics.median(r["seconds"] for r in runs if r["option"] == option)
               for option in ("--requeue", "--requeue=expedite")}
    result = {"slurm": current_release().value,
              "cred_expire": sh(cluster, "scontrol", "show", "config").split(
                  "cred_expire=")[-1].split()[0],
              "node_failure_median_s": summary, "node_failure": runs,
              "failed_run": failed_run(cluster, cwd),
              "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("node_failure_median_s", "failed_run")}, indent=2))


if __name__ == "__main__":
    main()
