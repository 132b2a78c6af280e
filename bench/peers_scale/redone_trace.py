"""Why each redone step was redone (issue 48): a cell's redone work attributed to its
cause, from a results file's raw runs.

Owns: ``attribute`` (pure: one raw run's work-log records, its fault outcomes and t0 ->
one ``Redone`` per run of a trial whose steps were executed again: the trial, the run,
its node, how many steps and seconds, the cause, and the fault that caused it),
``by_cause`` (the totals per cause), ``resumed_to_stop`` (runs that resumed a preempted or
killed trial only to be stopped before their first validation: work past a decided stop,
which ``worklog``'s lineage counts as useful, not redone) and ``main`` (``python -m
bench.peers_scale.redone_trace RESULTS.json``: one block per raw run; ``--json``).

Which steps are redone is ``worklog.count_work``'s rule, unchanged (its lineage is
reused, so the totals are the same, exactly): an executed step off the decided trial's
lineage whose step number the lineage holds. The run that executed it is the one whose
work was thrown away; the cause is why:

- ``older_checkpoint``: that run had saved a checkpoint holding the step, and the trial
  resumed from an older one (or from none): the system resumed from less than its latest
  (the checkpoint not yet recorded, garbage-collected, or not looked up) -- never physics;
- ``node_crash`` / ``preemption``: the run was killed (no ``end`` record) before it saved
  the step, and a fault of that kind hit its node (the ``start`` record's container key,
  ``<job>.<restart>.<node>``) from ``MATCH_S`` after its last record to the end of the
  injection; a log without the node (before the start-up split) is matched on time
  alone, among every node, and marked ``by: "time"``;
- ``login_kill`` / ``slurmctld_restart``: killed, and only such a fault (no node) came in
  that window -- a compute node's process should outlive both;
- ``killed``: killed, no fault in the window: the system killed it itself (a lease lost,
  a worker cancelled) or something not injected;
- ``ended_<reason>``: the run ended by itself (``preempted``, ``failed``, ...) without a
  checkpoint of the step: a signal's save that did not happen, an error.

Must not: run anything, or know which system ran the trial.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.peers_scale.worklog import DECIDED, _lineage, _runs, read_log

#: a kill is put on a fault that began at most this long after the run's last record
#: (a step of the slowest curve at time-scale 2 is ~19 s, then a checkpoint's save)
MATCH_S = 60.0
#: the fault's own end is stretched this much (clocks: the injector's and the trial's)
CLOCK_S = 1.0
NODE_FAULTS = {"node_crash": "node_crash", "preempt": "preemption"}
#: the user every system under test runs as (``run.py``): a fault whose ``exposed`` jobs
#: hold none of that user's cannot have killed a run of the system
SYSTEM_USER = "dethpc-bench"
OTHER_FAULTS = {"kill_login": "login_kill", "slurmctld_restart": "slurmctld_restart"}


@dataclass
class _RunFacts:
    """What ``attribute`` needs of one run beyond ``worklog``'s: walls and its node."""

    name: str
    start: float | None = None
    last: float = 0.0
    node: str = ""
    end: str = ""
    validated: bool = False


@dataclass(frozen=True)
class Redone:
    trial: str
    run: str
    node: str
    steps: int
    seconds: float
    cause: str
    fault: str = ""         # "<kind> <nodes> at <s>" of the matched fault
    by: str = ""            # "node" / "time": how the fault was matched
    last_s: float = 0.0     # the run's last record, s after t0
    resumed_s: float | None = None   # the trial's next run's start, s after t0


def _facts(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, _RunFacts]]:
    out: dict[str, dict[str, _RunFacts]] = {}
    for rec in records:
        run = out.setdefault(str(rec["trial"]), {}).setdefault(
            str(rec["run"]), _RunFacts(str(rec["run"])))
        wall = float(rec["wall"])
        run.last = max(run.last, wall)
        event = rec["event"]
        if event == "start":
            run.start = wall
            key = str(rec.get("container") or "")
            parts = key.split(".", 2)
            run.node = parts[2] if len(parts) == 3 else ""
        elif event == "validate":
            run.validated = True
        elif event == "end":
            run.end = str(rec.get("reason", ""))
    return out


def _fault_at(outcome: Mapping[str, Any], t0: float) -> tuple[float, float]:
    start = t0 + float(outcome.get("started_s", outcome.get("at_s", 0.0)))
    return start, start + float(outcome.get("took_s", 0.0) or 0.0)


def _describe(o: Mapping[str, Any]) -> str:
    nodes = ",".join(o.get("nodes") or [])
    return f"{o['kind']}{' ' + nodes if nodes else ''} at {o.get('started_s', o.get('at_s'))} s"


def kill_cause(last: float, node: str, outcomes: Sequence[Mapping[str, Any]],
               t0: float) -> tuple[str, str, str]:
    """(cause, fault, by) of a run killed after its last record at ``last`` on ``node``
    ("" when the log does not say)."""
    best: tuple[float, str, str, str] | None = None
    for o in outcomes:
        if o.get("refused") or o.get("skipped") or o["kind"] not in NODE_FAULTS:
            continue
        if node and node not in (o.get("nodes") or []):
            continue
        if not node and "exposed" in o and not any(
                e.get("user") == SYSTEM_USER for e in o["exposed"]):
            continue
        start, end = _fault_at(o, t0)
        if start - last > MATCH_S or last > end + CLOCK_S:
            continue
        gap = abs(start - last)
        if best is None or gap < best[0]:
            best = (gap, NODE_FAULTS[o["kind"]], _describe(o), "node" if node else "time")
    if best is not None:
        return best[1], best[2], best[3]
    for o in outcomes:
        if o.get("refused") or o.get("skipped") or o["kind"] not in OTHER_FAULTS:
            continue
        start, end = _fault_at(o, t0)
        if start - last <= MATCH_S and last <= end + CLOCK_S:
            return OTHER_FAULTS[o["kind"]], _describe(o), "time"
    return "killed", "", ""


def attribute(records: Sequence[Mapping[str, Any]], outcomes: Sequence[Mapping[str, Any]],
              t0: float) -> list[Redone]:
    """One ``Redone`` per (trial, run, cause) with redone steps (module doc)."""
    facts = _facts(records)
    out: list[Redone] = []
    for trial, runs in sorted(_runs(records).items()):
        if runs[-1].end not in DECIDED:
            continue                        # undecided: all its work is lost, not redone
        useful = _lineage(trial, runs)
        kept = {runs[i].steps[k][0] for i, k in useful}
        rf = facts[trial]
        starts = [rf[r.name].start for r in runs]
        for i, run in enumerate(runs):
            held = max(run.saves.values(), default=0)
            found: dict[str, list[float]] = {}
            for k, (step, seconds) in enumerate(run.steps):
                if (i, k) in useful or step not in kept:
                    continue
                if k < held:
                    cause = "older_checkpoint"
                elif run.end is None:
                    cause = "killed"
                else:
                    cause = f"ended_{run.end.value}"
                found.setdefault(cause, []).append(seconds)
            f = rf[run.name]
            later = [s for s in starts[i + 1:] if s is not None]
            resumed = round(later[0] - t0, 1) if later else None
            for cause, secs in found.items():
                fault = by = ""
                if cause == "killed":
                    cause, fault, by = kill_cause(f.last, f.node, outcomes, t0)
                out.append(Redone(trial=trial, run=run.name, node=f.node, steps=len(secs),
                                  seconds=sum(secs), cause=cause, fault=fault, by=by,
                                  last_s=round(f.last - t0, 1), resumed_s=resumed))
    return out


def by_cause(redone: Iterable[Redone]) -> dict[str, dict[str, float]]:
    """Per cause: ``runs``, ``steps``, ``seconds`` (rounded to 0.01 s)."""
    out: dict[str, dict[str, float]] = {}
    for r in redone:
        c = out.setdefault(r.cause, {"runs": 0, "steps": 0, "seconds": 0.0})
        c["runs"] += 1
        c["steps"] += r.steps
        c["seconds"] += r.seconds
    for c in out.values():
        c["seconds"] = round(c["seconds"], 2)
    return out


def resumed_to_stop(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Runs that resumed a trial whose previous run did not end decided (``preempted``,
    or killed: no ``end``) and ended ``stopped`` before any validation of their own: the
    stop was decided on an earlier validation, so the run's start-up, load and steps were
    spent past it (worklog counts the steps useful). Their trials, steps, step seconds
    and run seconds (start to end)."""
    facts = _facts(records)
    trials: list[str] = []
    steps = 0
    step_s = run_s = 0.0
    for trial, runs in sorted(_runs(records).items()):
        for prev, run in zip(runs, runs[1:], strict=False):
            f = facts[trial][run.name]
            if prev.end in DECIDED or run.end is None or run.end.value != "stopped" \
                    or f.validated:
                continue
            trials.append(trial)
            steps += len(run.steps)
            step_s += sum(s for _, s in run.steps)
            run_s += f.last - (f.start if f.start is not None else f.last)
    return {"runs": len(trials), "trials": trials, "steps": steps,
            "step_s": round(step_s, 2), "run_s": round(run_s, 2)}


def run_trace(run: Mapping[str, Any]) -> dict[str, Any] | None:
    """The attribution of one raw run of a results file (its work log read back)."""
    path = Path(str(run.get("worklog") or ""))
    if not path.is_file():
        return None
    records = read_log(path)
    redone = attribute(records, run.get("fault_outcomes") or [], float(run["t0"]))
    return {"by_cause": by_cause(redone), "redone": [asdict(r) for r in redone],
            "resumed_to_stop": resumed_to_stop(records)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    doc = json.loads(args.results.read_text())
    out = {run["cell"]: run_trace(run) for run in doc["runs"]
           if "faults" in str(run["cell"])}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for cell, t in out.items():
        if t is None:
            print(f"{cell}: no work log")
            continue
        total = sum(c["steps"] for c in t["by_cause"].values())
        secs = sum(c["seconds"] for c in t["by_cause"].values())
        print(f"{cell}: {total} steps redone, {secs:.2f} s")
        for cause, c in sorted(t["by_cause"].items()):
            print(f"  {cause}: {c['steps']} steps, {c['seconds']:.2f} s, {c['runs']} runs")
        for r in t["redone"]:
            print(f"    trial {r['trial']} run {r['run'][:8]} on {r['node'] or '?'}: "
                  f"{r['steps']} steps {r['seconds']:.2f} s, {r['cause']} "
                  f"({r['fault'] or '-'}{', by ' + r['by'] if r['by'] else ''}); last "
                  f"record {r['last_s']} s, resumed {r['resumed_s']} s")
        s = t["resumed_to_stop"]
        print(f"  resumed only to be stopped: {s['runs']} runs ({', '.join(s['trials'])}), "
              f"{s['steps']} steps, {s['step_s']:.2f} s of steps, {s['run_s']:.2f} s of runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
