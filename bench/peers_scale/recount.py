"""Recount the trials lost / unfinished of raw runs already recorded, by today's rule.

Owns: ``recount_run`` -- one raw run of a results file (``bench/results/peers_scale*.json``)
counted again from its work log (the path the run recorded) cut at the cell's end, with
the system's per-trial verdicts: those the run recorded (``system_facts["verdicts"]``),
else read from what its kept directory still holds (dethpc's store, Tune's experiment
snapshot, submitit's driver state); a run whose directory is gone falls back to
``metrics.trial_fates``' rule from the log alone. Beside the new figures it gives the
figures the run recorded and the older rule's (undecided minus in progress) at the same
cut, so a difference of cut and a difference of rule are told apart.

Each run also gets ``thrown`` (``metrics.thrown_figures``: the GPU-hours its cut runs
threw away, done again or not), for runs recorded before ``run.py`` counted it;
``table.py --thrown OUT.json`` puts them beside the table of the results file they came
from.

Run: ``python -m bench.peers_scale.recount OUT.json RESULTS.json...``; prints a Markdown
table. Must not: change a results file.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.peers_scale import metrics as mx
from bench.peers_scale.emulator import load_curves
from bench.peers_scale.peer_ray import NAME as RAY_NAME
from bench.peers_scale.peer_ray import snapshot_verdicts
from bench.peers_scale.peer_submitit import driver_verdicts
from bench.peers_scale.systems import dethpc_verdicts, read_trial_states
from bench.peers_scale.worklog import count_thrown, count_work, read_log


def cell_end(run: Mapping[str, Any], params: Mapping[str, Any]) -> float:
    """When the cell ended (run.py's ``ended``): t0 plus its search phase where the run
    recorded it, else its wall (finished) or the timeout (cut: the loop ends within a
    second of its deadline)."""
    if run.get("phases", {}).get("search_s") is not None:
        return float(run["t0"]) + float(run["phases"]["search_s"])
    m = run["metrics"]
    if m.get("finished") and m.get("wall_s") is not None:
        return float(run["t0"]) + float(m["wall_s"])
    return float(run["t0"]) + float(m.get("timeout_s") or params["timeout"])


def kept_verdicts(run: Mapping[str, Any]) -> tuple[dict[str, mx.Verdict] | None, str]:
    """The system's verdicts for ``run`` and where they came from."""
    facts = run.get("system_facts") or {}
    if (v := mx.parse_verdicts(facts)) is not None:
        return v, "recorded"
    cdir = Path(run["worklog"]).parent
    system = str(run["system"])
    raw: dict[str, str] | None = None
    source = "none (work log alone)"
    try:
        if system.startswith("dethpc") and (cdir / "home" / "dethpc.db").exists():
            raw = dethpc_verdicts(read_trial_states(cdir / "home" / "dethpc.db",
                                                    int(facts["experiment"])))
            source = "dethpc store"
        elif system == "ray-tune":
            raw = snapshot_verdicts(cdir / "ray_results" / RAY_NAME)
            source = "Tune snapshot" if raw is not None else source
        elif system == "submitit" and (cdir / "submitit" / "driver_state.json").exists():
            raw = driver_verdicts(json.loads((cdir / "submitit" / "driver_state.json")
                                             .read_text()))
            source = "submitit driver state"
    except (OSError, ValueError, KeyError, sqlite3.Error):
        raw = None
    if raw is None:
        return None, "none (work log alone)"
    return {t: mx.Verdict(v) for t, v in raw.items()}, source


def recount_run(run: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """``run`` counted again (see the module doc)."""
    m = run["metrics"]
    ended = cell_end(run, params)
    path = Path(run["worklog"])
    out: dict[str, Any] = {"cell": run["cell"], "seed": m.get("seed"),
                           "finished": bool(m["finished"]),
                           "recorded": {k: m.get(k) for k in (
                               "trials_lost", "trials_unfinished", "gpu_hours_lost",
                               "gpu_hours_unfinished")}}
    if not path.exists():
        out["error"] = f"{path}: the work log is gone"
        return out
    records = [r for r in read_log(path) if float(r["wall"]) <= ended]
    log_work = count_work(records)
    finished = bool(m["finished"])
    slowest = max(max(c.step_s) for c in load_curves()) * float(params["time_scale"])
    running = set() if finished else mx.in_progress(
        records, ended, max(slowest, float(params.get("startup_s", 10.0))) + 5.0)
    verdicts, source = kept_verdicts(run)
    fates = mx.trial_fates(log_work.trials, finished=finished, in_progress=running,
                           verdicts=verdicts)
    decided = {t for t, f in fates.items() if f is mx.Fate.DECIDED}
    work = count_work(records, decided=decided)
    out["old_rule_same_cut"] = {
        "trials_lost": log_work.trials_undecided - len(running),
        "trials_unfinished": len(running),
        "gpu_hours_lost": round(sum(t.lost_s for t in log_work.trials
                                    if t.trial not in running) / 3600, 5),
        "gpu_hours_unfinished": round(sum(t.lost_s for t in log_work.trials
                                          if t.trial in running) / 3600, 5)}
    out["new_rule"] = mx.fate_figures(work.trials, fates)
    out["thrown"] = mx.thrown_figures(count_thrown(records, running, decided))
    out["verdicts_from"] = source
    out["undecided_by_log"] = sorted(
        (t.trial, t.last_end.value if t.last_end else "no end", fates[t.trial].value)
        for t in log_work.trials if not t.decided)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| results file | cell | recorded lost / unfinished | old rule, same cut | "
             "new rule lost / unfinished (decided by the system) | verdicts from | "
             "GPU-h thrown (cut runs, never resumed) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        rec, new = r["recorded"], r.get("new_rule", {})
        old = r.get("old_rule_same_cut", {})
        th = r.get("thrown", {})
        lines.append(f"| {r['file']} | {r['cell']} | {rec['trials_lost']} / "
                     f"{rec['trials_unfinished']} | {old.get('trials_lost')} / "
                     f"{old.get('trials_unfinished')} | {new.get('trials_lost')} / "
                     f"{new.get('trials_unfinished')} "
                     f"({new.get('trials_decided_by_system')}) | {r.get('verdicts_from')} | "
                     f"{th.get('gpu_hours_thrown')} ({th.get('runs_cut')}, "
                     f"{th.get('runs_cut_never_resumed')}) |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    out, files = Path(argv[0]), [Path(a) for a in argv[1:]]
    rows: list[dict[str, Any]] = []
    for f in files:
        doc = json.loads(f.read_text())
        for run in doc["runs"]:
            rows.append({"file": f.name, "commit": doc.get("commit"),
                         **recount_run(run, doc["params"])})
    out.write_text(json.dumps({"rule": "bench/peers_scale/metrics.trial_fates",
                               "runs": rows}, indent=1) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
