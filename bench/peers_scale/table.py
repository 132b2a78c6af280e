"""The peers-at-scale headline: Markdown tables from ``peers_scale.json`` (issue 48, item 9).

Owns ``render(doc)``: the regime and the run (commit, date, seeds, cluster, fault plan,
faults refused, preemption waits cut short by a cell's end) above one table of every
cell of ``summary`` (plain cells first) and one of the goals (``doc["goals"]``, or
computed by goals.goals from the summary for a doc written before they were), the misses
in bold; and ``replace_block(text, block)``: the text between
``<!-- peers_scale:begin -->`` and ``<!-- peers_scale:end -->`` replaced.

  python -m bench.peers_scale.table [bench/results/peers_scale.json]          # print
  python -m bench.peers_scale.table [json] --write   # README.md and bench/peers_scale/README.md
  python -m bench.peers_scale.table [json] --thrown RECOUNT.json   # + the work thrown away

``--write`` refuses a doc marked ``"smoke": true`` (a smoke is not the issue's table)
unless ``--allow-smoke``, and a README without exactly one pair of markers.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.peers_scale.goals import GOALS, MISSED, NOT_MEASURED, goals

REPO = Path(__file__).resolve().parents[2]
DEFAULT_JSON = REPO / "bench" / "results" / "peers_scale.json"
READMES = (REPO / "README.md", REPO / "bench" / "peers_scale" / "README.md")
BEGIN, END = "<!-- peers_scale:begin -->", "<!-- peers_scale:end -->"

#: (column header, how a summary cell shows it)
COLUMNS: tuple[str, ...] = (
    "cell", "reached", "time to target, median (IQR)", "decided after (median)",
    "trials lost", "GPU-h allocated", "GPU-h redone / lost", "human actions",
    "RPCs per trial", "peak RPCs/s", "login CPU s")
#: the column of the work thrown away, where the cells hold it (run.py counts it; for an
#: older run, a recount beside it: ``with_thrown``)
THROWN_COLUMN = "GPU-h thrown away (cut runs never resumed)"


def split(p: Mapping[str, Any]) -> str:
    """How the start-up splits (emulator: the container once a job run on a node, CUDA
    once a process); "" for a run from before the split (no ``container_s``)."""
    if p.get("container_s") is None or p.get("startup_s") is None:
        return ""
    cuda = float(p["startup_s"]) - float(p["container_s"])
    return (f": container {_n(float(p['container_s']), ' s', 0)} once a job run, CUDA "
            f"{_n(cuda, ' s', 0)} once a process")


def _n(v: Any, unit: str = "", digits: int = 2) -> str:
    if v is None:
        return "--"
    if isinstance(v, float):
        return f"{v:.{digits}f}{unit}"
    return f"{v}{unit}"


def cell_row(name: str, c: Mapping[str, Any]) -> list[str]:
    iqr = c.get("time_to_target_iqr_s") or [None, None]
    ttt = _n(c.get("time_to_target_median_s"), " s", 1)
    if iqr[0] is not None and iqr != [c.get("time_to_target_median_s")] * 2:
        ttt += f" ({_n(iqr[0], '', 1)}-{_n(iqr[1], ' s', 1)})"
    decided = c.get("wall_until_decided_median_s")
    unfinished = c.get("trials_unfinished_at_timeout") or 0
    decided_s = _n(decided, " s", 0) if decided is not None else \
        f"**not all by {_n(c.get('timeout_s'), ' s', 0)}**"
    if unfinished:
        decided_s += f" ({unfinished} unfinished)"
    reached = str(c.get("reached", "--"))
    k, _, n = reached.partition("/")
    if n and k != n:
        reached = f"**{reached}**"
    lost = c.get("trials_lost")
    return [f"`{name}`", reached, ttt, decided_s,
            f"**{lost}**" if lost else _n(lost),
            _n(c.get("gpu_hours_allocated")),
            f"{_n(c.get('gpu_hours_redone'), '', 3)} / {_n(c.get('gpu_hours_lost'), '', 3)}",
            f"**{c['human_actions']}**" if c.get("human_actions") else _n(c.get("human_actions")),
            _n(c.get("rpcs_per_trial")), _n(c.get("peak_rpcs_per_s"), "", 1),
            _n(c.get("login_cpu_s"), "", 1)]


def thrown_cell(c: Mapping[str, Any]) -> str:
    if c.get("gpu_hours_thrown") is None:
        return "--"
    never = c.get("runs_cut_never_resumed")
    return f"{_n(c.get('gpu_hours_thrown'), '', 4)} ({_n(never)})"


def with_thrown(doc: Mapping[str, Any], recount: Mapping[str, Any],
                name: str) -> dict[str, Any]:
    """``doc`` (the results file ``name``) with each cell's ``gpu_hours_thrown`` and
    ``runs_cut_never_resumed`` summed from ``recount`` (recount.py's output over this
    same file: its rows of ``name`` at the doc's commit), for runs recorded before
    run.py counted them; a cell whose seeds the recount lacks stays without. The goals
    are computed again from the summary (goals.py is pure over it)."""
    rows = [r for r in recount.get("runs", []) if r.get("file") == name
            and r.get("commit") == doc.get("commit") and "thrown" in r]
    out = dict(doc)
    summary = {k: dict(v) for k, v in doc["summary"].items()}
    for cell, c in summary.items():
        mine = {r.get("seed"): r["thrown"] for r in rows if r.get("cell") == cell}
        if c.get("gpu_hours_thrown") is not None or set(mine) != set(c.get("seeds") or []):
            continue
        c["gpu_hours_thrown"] = round(sum(float(t["gpu_hours_thrown"])
                                          for t in mine.values()), 4)
        c["runs_cut_never_resumed"] = sum(int(t["runs_cut_never_resumed"])
                                          for t in mine.values())
    out["summary"] = summary
    out["goals"] = goals(summary)
    out["thrown_from"] = f"recounted after the run from its kept work logs ({name}'s recount)"
    return out


def _md(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |",
            *("| " + " | ".join(r) + " |" for r in rows)]


def ordered_cells(summary: Mapping[str, Any]) -> list[str]:
    """Plain cells, then the fault cells, each in the summary's order (the run's)."""
    return [c for c in summary if not c.endswith("+faults")] + \
        [c for c in summary if c.endswith("+faults")]


def limits(p: Mapping[str, Any]) -> str:
    """A cell's limit, or a fault and a plain cell's when they differ, and the fault
    schedule's horizon when it is not the fault cells' limit."""
    fault, plain = p.get("timeout"), p.get("plain_timeout")
    if plain is None or plain == fault or p.get("faults") != "both":
        plain_only = p.get("faults") == "off" and plain is not None
        text = f"a cell's limit {_n(plain if plain_only else fault, ' s', 0)}"
    else:
        text = (f"a fault cell's limit {_n(fault, ' s', 0)}, a plain cell's "
                f"{_n(plain, ' s', 0)}")
    horizon = p.get("fault_horizon")
    if horizon is not None and horizon != fault and p.get("faults") != "off":
        text += f" (the faults spread over a {_n(horizon, ' s', 0)} horizon)"
    return text


def cut_short(doc: Mapping[str, Any]) -> str:
    """The preemptions whose wait the cell's end cut short (faults.py: not refusals),
    beside the refusals: the doc's count, else the outcomes' (a doc written before the
    count says nothing of them)."""
    n = doc.get("faults_cut_short")
    if n is None:
        n = sum(bool(o.get("cut_short")) for events in (doc.get("fault_outcomes") or {})
                .values() for o in events) or None
    return "" if n is None else f"; preemptions cut short by the cell's end (not refused): {n}"


def regime(doc: Mapping[str, Any]) -> str:
    p, cl = doc.get("params") or {}, doc.get("cluster") or {}
    plan = doc.get("fault_plan") or {}
    seeds = sorted({s for c in doc["summary"].values() for s in c.get("seeds", [])})
    smoke = "**SMOKE TEST, not the issue's table.** " if doc.get("smoke") else ""
    if p.get("quick") and not doc.get("smoke"):
        smoke = ("**QUICK RUN (`--quick`: one seed of each system, fault cells only), not "
                 "the issue's full table.** ")
    faults = (f"the fault schedule (seeded, from the first sbatch, the same for every "
              f"system): {plan.get('crashes')} node crashes revived after "
              f"{_n(plan.get('crash_down_s'), ' s', 0)}, {plan.get('preemptions')} preemptions "
              f"of {plan.get('preempt_nodes')} nodes for "
              f"{_n(plan.get('preempt_hold_s'), ' s', 0)}, "
              f"{plan.get('login_kills')} kill -9 of the login-side process, "
              f"{plan.get('ctld_restarts')} slurmctld restart; faults refused by Slurm: "
              f"{doc.get('faults_refused', '--')}{cut_short(doc)}") if plan \
        else "no fault plan recorded"
    if p.get("faults") == "off":
        faults = "no fault cells"
    return (f"{smoke}One run of `python -m bench.peers_scale.run` at commit "
            f"`{str(doc.get('commit', '?'))[:10]}`, {doc.get('date', '?')}, seeds "
            f"{', '.join(map(str, seeds))}: {p.get('trials')} trials (the same draws for every "
            f"system; ASHA, eta 4, rungs at 1/4/16 validation periods, where it has it) on "
            f"{cl.get('gpus')} emulated GPUs "
            f"({cl.get('nodes')} nodes, {cl.get('gpu_type')}), other users' jobs keeping "
            f"{_n(100 * p['busy'] if p.get('busy') is not None else None, '%', 0)} of them "
            f"busy, sleeping trials replaying recorded curves (time-scale "
            f"{p.get('time_scale')}, start-up {_n(p.get('startup_s'), ' s', 0)}{split(p)}), "
            f"{limits(p)} from its first sbatch (an unreached seed counts at it); {faults}. "
            f"Medians over the seeds; trials lost, GPU-hours and "
            f"human actions summed over them. Raw runs and plots: `bench/results/"
            f"peers_scale*.json`, `peers_scale_regret*.svg`.")


def goal_rows(g: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for system, gs in g["systems"].items():
        for x in gs:
            st = x["status"]
            shown = f"**{st}**" if st == MISSED else (f"_{st}_" if st == NOT_MEASURED else st)
            rows.append([f"`{system}`", GOALS.get(x["goal"], x["goal"]), shown,
                         str(x["why"]).replace("|", "/")])
    return rows


def render(doc: Mapping[str, Any]) -> str:
    summary = doc["summary"]
    g = doc.get("goals") or goals(summary)
    c = g["counts"]
    thrown = any(v.get("gpu_hours_thrown") is not None for v in summary.values())
    header = (*COLUMNS[:7], THROWN_COLUMN, *COLUMNS[7:]) if thrown else COLUMNS
    rows = []
    for n in ordered_cells(summary):
        row = cell_row(n, summary[n])
        rows.append([*row[:7], thrown_cell(summary[n]), *row[7:]] if thrown else row)
    note = ""
    if thrown:
        note = ("GPU-h thrown away: the steps every run cut by a fault (killed, or failed) "
                "had executed since its last checkpoint, done again or not (a trial never "
                "resumed shows here and not in redone); in brackets the cut runs never run "
                "again" + (f"; {doc['thrown_from']}" if doc.get("thrown_from") else "")
                + ".")
    lines = [regime(doc), "", *_md(header, rows), "", *([note, ""] if note else []),
             f"The issue's goals for dethpc at {g.get('min_gpus', 64)}+ GPUs (computed by "
             f"`bench/peers_scale/goals.py`, never asserted): {c.get('met', 0)} met, "
             f"{c.get(MISSED, 0)} missed, {c.get(NOT_MEASURED, 0)} not measured.", "",
             *_md(("dethpc", "goal", "status", "figures"), goal_rows(g))]
    return "\n".join(lines)


def replace_block(text: str, block: str, begin: str = BEGIN, end: str = END) -> str:
    """``text`` with what lies between the markers (exactly one pair, in order) replaced
    by ``block``; the markers stay."""
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"need exactly one {begin} and one {end}")
    head, _, rest = text.partition(begin)
    if end not in rest:
        raise ValueError(f"{end} comes before {begin}")
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{block.strip()}\n{end}{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("json", nargs="?", type=Path, default=DEFAULT_JSON)
    ap.add_argument("--write", action="store_true",
                    help="replace the marked block in README.md and bench/peers_scale/README.md")
    ap.add_argument("--allow-smoke", action="store_true",
                    help="let --write put a smoke test's table in the READMEs")
    ap.add_argument("--readme", type=Path, action="append",
                    help="the files --write edits (default: the two READMEs)")
    ap.add_argument("--thrown", type=Path,
                    help="recount.py's output over this results file: the work thrown "
                         "away of runs recorded before run.py counted it")
    args = ap.parse_args(argv)
    doc = json.loads(args.json.read_text())
    if args.thrown:
        doc = with_thrown(doc, json.loads(args.thrown.read_text()), args.json.name)
    block = render(doc)
    if not args.write:
        print(block)
        return 0
    if doc.get("smoke") and not args.allow_smoke:
        print(f"table: {args.json} is a smoke test (\"smoke\": true), not the issue's table; "
              "not written (--allow-smoke to force)", file=sys.stderr)
        return 2
    files = args.readme or list(READMES)
    texts = {}
    for f in files:                      # all or none: check every file before writing
        try:
            texts[f] = replace_block(f.read_text(), block)
        except ValueError as exc:
            print(f"table: {f}: {exc}", file=sys.stderr)
            return 2
    for f, t in texts.items():
        f.write_text(t)
        print(f"wrote the table into {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
