"""bench/peers_scale/recount: a recorded run counted again by metrics.trial_fates, with
the verdicts its kept directory still holds (here: a dethpc store)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from bench.peers_scale.recount import recount_run, table


def _log(path: Path, trial: str, steps: int, end: str | None, t: float) -> None:
    recs: list[dict[str, Any]] = [{"trial": trial, "run": f"{trial}r", "event": "start",
                                   "step": 0, "wall": t}]
    recs += [{"trial": trial, "run": f"{trial}r", "event": "step", "step": s, "seconds": 3.6,
              "wall": t + s} for s in range(1, steps + 1)]
    if end:
        recs.append({"trial": trial, "run": f"{trial}r", "event": "end", "reason": end,
                     "step": steps, "wall": t + steps + 0.5})
    with path.open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)


def test_a_stop_the_store_recorded_is_not_a_lost_trial(tmp_path: Path) -> None:
    """Trial 216 stopped by the searcher, killed before its end record; trial 7 ERROR
    (max_restarts spent); trial 3 completed: the old rule lost 2, the new one 1."""
    cdir = tmp_path / "dethpc-pool+faults-s0"
    (cdir / "home").mkdir(parents=True)
    log = cdir / "worklog.jsonl"
    _log(log, "3", 4, "completed", 100.0)
    _log(log, "216", 4, None, 100.0)
    _log(log, "7", 2, "failed", 100.0)
    with sqlite3.connect(cdir / "home" / "dethpc.db") as db:
        db.execute("create table trial (id integer, experiment_id integer, state text)")
        db.executemany("insert into trial values (?, 1, ?)",
                       [(3, "COMPLETED"), (216, "STOPPED"), (7, "ERROR")])
    run = {"cell": "dethpc-pool+faults", "system": "dethpc-pool", "t0": 100.0,
           "worklog": str(log), "phases": {"search_s": 50.0},
           "system_facts": {"experiment": 1, "trial_states": {"COMPLETED": 1}},
           "metrics": {"finished": True, "wall_s": 50.0, "trials_lost": 2,
                       "trials_unfinished": 0, "gpu_hours_lost": 0.006,
                       "gpu_hours_unfinished": 0.0}}
    got = recount_run(run, {"time_scale": 0.25, "timeout": 190.0})
    assert got["old_rule_same_cut"]["trials_lost"] == 2
    assert got["verdicts_from"] == "dethpc store"
    assert got["new_rule"] == {"trials_lost": 1, "trials_unfinished": 0,
                               "trials_decided_by_system": 1, "gpu_hours_lost": 0.002,
                               "gpu_hours_unfinished": 0.0}
    assert "| 2 / 0 | 2 / 0 | 1 / 0 (1) | dethpc store |" in table([{"file": "x", **got}])
    # thrown away: the failed trial's 2 unsaved steps (7.2 s), never run again; the
    # stopped one killed in its save is decided, its steps kept
    assert got["thrown"] == {"gpu_hours_thrown": 0.002, "runs_cut": 1,
                             "runs_cut_never_resumed": 1}
    assert "| 0.002 (1, 1) |" in table([{"file": "x", **got}])
