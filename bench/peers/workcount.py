"""The work a bench/peers search did, counted the same way for every system (issue 48, item 7).

Owns ``count_work(events)``: from ``cnn.WorkLog``'s events (``start``, ``batch``,
``validate``, ``end``; per trial, in file order), per trial and in total:

* ``executed``: batches trained, every run of every trial;
* ``redone``: batches trained again -- a batch index of a trial trained more than once
  (the run after a restore from an earlier checkpoint, or from scratch, trains again
  what a killed run had trained, validated or not: the batches since the last
  checkpoint a crash destroys are counted, not only those between two validations);
* ``abandoned``: a trial whose last run was killed in the middle of training (no
  ``end`` and its last event a ``batch``: a run its system stopped at a validation,
  as Ray's scheduler does, ends on a ``validate``) and never ran again -- its result
  never reached the search; ``lost`` counts all its batches (as Optuna's journal
  leaves a killed worker's trial RUNNING for ever, not only the last validation period).

Replaces ``run.redone_batches``, which counted a (trial, length) validated twice: it
missed the batches lost between validations and the work on abandoned trials, so
Optuna's 0 was guaranteed. Pure: no I/O but ``read_events``.
Must not: know which system wrote the events.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass
class TrialWork:
    trial: str
    runs: int = 0
    executed: int = 0
    distinct: int = 0
    redone: int = 0
    abandoned: bool = False
    lost: int = 0


def count_work(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per trial and in total (see the module doc); ``events`` in the order written."""
    trained: dict[str, list[int]] = {}
    runs: dict[str, int] = {}
    last: dict[str, str] = {}
    for e in events:
        trial, kind = str(e["trial"]), str(e["event"])
        trained.setdefault(trial, [])
        if kind == "start":
            runs[trial] = runs.get(trial, 0) + 1
        elif kind == "batch":
            trained[trial].append(int(e["batch"]))
        last[trial] = kind
    trials = []
    for trial, batches in trained.items():
        w = TrialWork(trial, runs=runs.get(trial, 0), executed=len(batches),
                      distinct=len(set(batches)))
        w.redone = w.executed - w.distinct
        w.abandoned = last.get(trial) == "batch"
        w.lost = w.distinct if w.abandoned else 0
        trials.append(w)
    return {"batches_executed": sum(w.executed for w in trials),
            "batches_redone": sum(w.redone for w in trials),
            "batches_lost": sum(w.lost for w in trials),
            "trials_abandoned": sum(w.abandoned for w in trials),
            "runs": sum(w.runs for w in trials),
            "trials": [asdict(w) for w in trials if w.redone or w.abandoned or w.runs > 1]}


def read_events(path: Path) -> list[dict[str, Any]]:
    """The work log's events (a torn last line, from a run killed while writing, is
    skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
