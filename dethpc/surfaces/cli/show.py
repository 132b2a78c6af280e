"""What ``dethpc experiment list`` and ``experiment describe`` print, from their dicts.

Owns: ``experiment_list``, ``experiment_describe``, ``say_unrun`` (what ``trial logs`` says
of a trial that ended without output) (the table or ``--json`` of a view's
dict, ``dethpc.surfaces.views``), the trial table's hyperparameter columns and the words
for a straggler and an experiment's kind. Both the typer commands (``experiment_cmd``)
and the read path (``fastread``) print through here, so their output is the same bytes.
Must not: read the store, or import typer or the ORM.
"""

from __future__ import annotations

import time
from typing import Any

from dethpc.store.states import TrialState
from dethpc.surfaces.cli import output
from dethpc.surfaces.cli.output import fmt_metric, print_json, say, table
from dethpc.surfaces.layout import (
    Col,
    fit,
    flat_hparams,
    fmt_value,
    kv_text,
    one_line,
    terminal_width,
)

#: what each experiment kind means, for ``describe``
KIND_WORDS = {
    "managed": "dethpc submit: the daemon submits its trials",
    "script": "dethpc sbatch --search: the daemon submits the wrapped script",
    "sbatch": "dethpc sbatch: submitted once by the CLI, tracked by the daemon",
    "detached": "a job dethpc did not submit that registered itself; tracked only",
}


def experiment_list(rows: list[dict[str, Any]], *, json_out: bool, wide: bool) -> None:
    if json_out:
        print_json(rows)
        return
    table("Experiments", [Col("id", keep=100), Col("name", shrink=True, keep=90),
                          Col("kind", keep=40), Col("state", keep=95),
                          Col("progress", keep=80), Col("labels", shrink=True, keep=30),
                          Col("owner", shrink=True, keep=60)],
          [[r["id"], r["name"], r["kind"], r["state"], f"{r['progress']:.0%}",
            ",".join(r["labels"]), r["owner"]] for r in rows], wide=wide)


def experiment_describe(d: dict[str, Any], *, json_out: bool, wide: bool) -> None:
    if json_out:
        print_json(d)
        return
    metric = d["searcher"]["metric"]
    say(f"Experiment {d['id']} {d['name']}: {d['state']} ({d['progress']:.0%}), searcher "
        f"{d['searcher']['name']}, metric {metric} "
        f"({'smaller' if d['searcher']['smaller_is_better'] else 'larger'} is better)",
        wide=wide)
    say(f"kind: {d['kind']} ({KIND_WORDS.get(d['kind'], d['kind'])})", wide=wide)
    if d["message"]:
        say(f"message: {d['message']}", wide=wide)
    base = [Col("trial", keep=100), Col("state", keep=90),
            Col("waiting for", shrink=True, min_width=10, keep=45), Col("steps", keep=70),
            Col(f"best {metric}", keep=80), Col("rung", keep=30), Col("searcher", keep=35),
            Col("restarts", keep=20), Col("best checkpoint", shrink=True, keep=60)]
    cells = [[t["id"], t["state"], t["pending_reason"] or "", t["steps_completed"],
              fmt_metric(t["best_validation"]), t["rung"], t["searcher_status"],
              t["restarts"], t["best_checkpoint"]] for t in d["trials"]]
    cols, rows = hparam_columns(base, cells, [t["hparams"] for t in d["trials"]], wide=wide)
    table("Trials", cols, rows, wide=wide)
    for t in d["trials"]:
        if t.get("hold"):
            say(f"trial {t['id']}: {t['hold']}", wide=wide, hang=2)
        if t.get("straggler"):
            say(f"trial {t['id']}: slowest {straggler_text(t['straggler'])}", wide=wide,
                hang=2)
    for n in d.get("excluded_nodes", []):
        runs = ", ".join(f"trial {r['trial_id']} job {r['job']}" for r in n["evidence"])
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(n["last_at"]))
        say(f"node {n['node']} excluded from later jobs: {n['failures']} failed runs in a "
            f"row, the last at {last} ({runs})", wide=wide, hang=2)
    for b in d["rungs"]:
        table(f"ASHA bracket {b.get('bracket', 0)} ({b.get('created', '?')} trial(s) created)",
              ["rung", "length", "reports", "keep", f"cut-off {metric}"],
              [[i, r.get("length"), len(r.get("metrics", [])), r.get("keep"),
                fmt_metric(r.get("cutoff"))] for i, r in enumerate(b.get("rungs", []))],
              wide=wide)
    best = d["best_trial"]
    if best:
        ckpt = best["best_checkpoint"]
        say(f"best trial {best['id']}: {metric}={fmt_metric(best['best_validation'])}"
            + (f" checkpoint {ckpt}" if ckpt else ""), wide=wide, hang=2)
        say(f"  hparams: {kv_text(best['hparams'])}", wide=wide, hang=4)


def straggler_text(s: dict[str, object]) -> str:
    """``describe``'s words for a trial's straggler (``views.straggler_of``)."""
    from dethpc.control.stragglers import Straggler

    return Straggler(**s).describe()  # type: ignore[arg-type]


def hparam_columns(base: list[Col], cells: list[list[object]], hparams: list[dict[str, object]],
                   *, wide: bool) -> tuple[list[Col], list[list[object]]]:
    """The trial table's columns with the hyperparameters in their own columns (one per
    flattened name) when those fit the terminal with no column left out (always with
    ``wide``), else in one ``hparams`` column of ``k=v`` pairs, cut with ``…``."""
    flat = [flat_hparams(h) for h in hparams]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    own_cols = base + [Col(k, keep=40) for k in keys]
    own_cells: list[list[object]] = [c + [fmt_value(f[k]) if k in f else "" for k in keys]
                                     for c, f in zip(cells, flat, strict=True)]
    if wide or not fit(own_cols, [[one_line(v) for v in c] for c in own_cells],
                       terminal_width()).dropped:
        return own_cols, own_cells
    return (base + [Col("hparams", shrink=True, min_width=12, keep=50)],
            [c + [kv_text(h)] for c, h in zip(cells, hparams, strict=True)])


def say_unrun(detail: dict[str, Any], printed: bool) -> None:
    note = unrun_note(detail, printed)
    if note is not None:   # rich is imported only when there is something to say
        output.err_console.print(note, highlight=False, markup=False, soft_wrap=True)


def unrun_note(detail: dict[str, Any], printed: bool) -> str | None:
    """What a log stream says of a trial that ended without a line of job output (its
    image could not be pulled, its job was refused or never started): why it ended, as
    Determined's trial log would; None while it runs or when it printed anything."""
    if printed or not TrialState(detail["state"]).is_terminal or not detail["exit_reason"]:
        return None
    return (f"dethpc: trial {detail['id']} ended {TrialState(detail['state']).value} "
            f"without job output: {detail['exit_reason']}")
