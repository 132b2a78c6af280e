"""Where a cell's time to target goes (issue 48): the chain of the trial that reached the
target first, from a results file's raw runs.

Owns: ``target_chain`` (pure: one run's work-log records, its ``sacct -D`` rows, t0 and the
target -> the chain's moments in seconds after t0: the job's start (``sacct`` Start, whole
seconds; the job from the ``start`` record's container key, ``<job>.<restart>.<node>``),
the trial process's start, start-up over (``ready``, with the container and CUDA seconds
it paid), the first step, the target's validation) and ``main`` (``python -m
bench.peers_scale.target_trace RESULTS.json``: one line per run; ``--json`` to print them
as JSON). Must not: run anything, or know which system ran the trial.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.peers_scale.worklog import read_log


def _job_start(rows: Sequence[Mapping[str, str]], job: str) -> float | None:
    for row in rows:
        if row.get("JobIDRaw") == job and row.get("Start") not in (None, "", "Unknown", "None"):
            return datetime.fromisoformat(row["Start"]).timestamp()
    return None


def target_chain(records: Iterable[Mapping[str, Any]], sacct_rows: Sequence[Mapping[str, str]],
                 t0: float, target: float) -> dict[str, Any] | None:
    """The chain of the first validation at or below ``target`` (None: never reached)."""
    recs = sorted(records, key=lambda r: float(r["wall"]))
    hit = next((r for r in recs if r["event"] == "validate" and float(r["loss"]) <= target),
               None)
    if hit is None:
        return None
    run = [r for r in recs if r["run"] == hit["run"]]

    def at(event: str) -> float | None:
        found = next((r for r in run if r["event"] == event), None)
        return None if found is None else round(float(found["wall"]) - t0, 2)

    start = next((r for r in run if r["event"] == "start"), {})
    ready = next((r for r in run if r["event"] == "ready"), {})
    key = str(start.get("container", ""))
    job = key.split(".", 1)[0] if key else ""
    job_start = _job_start(sacct_rows, job) if job else None
    return {"trial": hit["trial"], "run": hit["run"], "curve": start.get("curve"),
            "job": job or None,
            "job_start_s": None if job_start is None else round(job_start - t0, 1),
            "process_start_s": at("start"), "ready_s": at("ready"),
            "container_s": ready.get("container_s"), "cuda_s": ready.get("cuda_s"),
            "first_step_s": at("step"), "target_s": round(float(hit["wall"]) - t0, 2),
            "target_step": hit["step"],
            "restored": any(r["event"] == "load" for r in run)}


def run_chain(run: Mapping[str, Any], target: float) -> dict[str, Any] | None:
    """``target_chain`` of one raw run of a results file (its work log read back)."""
    path = Path(str(run.get("worklog") or ""))
    if not path.is_file():
        return None
    return target_chain(read_log(path), run.get("sacct_runs", []), float(run["t0"]), target)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    doc = json.loads(args.results.read_text())
    target = float(doc["target"]["target_loss"])
    out = {run["cell"]: run_chain(run, target) for run in doc["runs"]}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for cell, c in out.items():
        if c is None:
            print(f"{cell}: not reached (or no work log)")
            continue
        print(f"{cell}: trial {c['trial']} (curve {c['curve']}): job start {c['job_start_s']} s"
              f" -> process {c['process_start_s']} -> ready {c['ready_s']} (container "
              f"{c['container_s']}, cuda {c['cuda_s']}) -> first step {c['first_step_s']} -> "
              f"target {c['target_s']} at step {c['target_step']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
