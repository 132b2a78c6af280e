"""What a searcher would do, before anything is submitted (``det preview-search``).

Owns: ``preview_search`` -- runs the real searcher against a simulated clock in
which every trial trains one unit per tick and reports random metrics drawn
from ``random.Random(seed)`` (Determined's preview also feeds random metrics),
then counts per bracket and rung how many trials train to which length and the
total training units -- and ``render_preview``, its plain-text table.
Must not: do I/O or print; the CLI prints the string.

Counts for adaptive_asha depend on the metrics, so they are one plausible run
(exact for single, random and grid); Determined's preview has the same caveat.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

from dethpc.common.exitcodes import TrialExit
from dethpc.config.model import HParamTree, SearcherConfig
from dethpc.searchers.asha import AshaSearcher
from dethpc.searchers.base import Action, Continue, Create, Searcher, Shutdown, Stop
from dethpc.searchers.factory import make_searcher


class _Sim:
    """Tiny discrete-event loop: a trial reports at each validate_at length, one unit per tick."""

    def __init__(self, searcher: Searcher, seed: int) -> None:
        self.searcher = searcher
        self.rng = random.Random(seed)
        self.events: list[tuple[float, int, int, int, bool]] = []  # time, seq, rid, length, last
        self.seq = 0
        self.now = 0.0
        self.trained: dict[int, int] = {}     # rid -> units trained so far
        self.stopped: set[int] = set()

    def run(self) -> None:
        self._apply(self.searcher.initial())
        while self.events:
            time, _, rid, length, last = heapq.heappop(self.events)
            if rid in self.stopped:
                continue
            self.now = time
            self.trained[rid] = length
            self._apply(self.searcher.on_validation(rid, self.rng.random(), length))
            if last and rid not in self.stopped:
                self._apply(self.searcher.on_exited(rid, TrialExit.COMPLETED))

    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, (Create, Continue)):
                self._schedule(action.request_id, action.length, action.validate_at)
            elif isinstance(action, Stop):
                self.stopped.add(action.request_id)
                self._apply(self.searcher.on_exited(action.request_id, TrialExit.STOPPED))
            elif isinstance(action, Shutdown):
                self.events.clear()

    def _schedule(self, rid: int, length: int, validate_at: tuple[int, ...]) -> None:
        start = self.trained.setdefault(rid, 0)
        self.stopped.discard(rid)
        points = sorted({v for v in validate_at if start < v <= length} | {length})
        for point in points:
            self.seq += 1
            heapq.heappush(self.events, (self.now + point - start, self.seq, rid, point,
                                         point == length))


def _bracket_rows(searcher: Searcher, trained: dict[int, int]) -> list[dict[str, Any]]:
    described = searcher.rungs()
    if not described:
        length = max(trained.values(), default=0)
        described = [{"bracket": 0, "num_rungs": 1, "rungs": [{"length": length}]}]
    by_bracket: dict[int, list[int]] = {}
    for rec in searcher.trials():
        by_bracket.setdefault(rec.bracket, []).append(trained.get(rec.request_id, 0))
    rows = []
    for b in described:
        finals = by_bracket.get(b["bracket"], [])
        lengths = [r["length"] for r in b["rungs"]]
        rungs = [{"length": L,
                  "trials_reaching": sum(1 for f in finals if f >= L),
                  "trials_ending": sum(1 for f in finals if f == L)} for L in lengths]
        rows.append({"bracket": b["bracket"], "num_rungs": len(lengths), "trials": len(finals),
                     "rungs": rungs, "units": sum(finals)})
    return rows


def preview_search(config: SearcherConfig, hparams: HParamTree, seed: int) -> dict[str, Any]:
    """Summary of the trials ``config`` would create: per bracket the trials, rung lengths,
    how many trials reach and end at each rung, and the total training units."""
    searcher = make_searcher(config, hparams, seed)
    sim = _Sim(searcher, seed)
    sim.run()
    brackets = _bracket_rows(searcher, sim.trained)
    unit = config.max_length.unit.value if config.max_length else "units"
    return {
        "searcher": config.name,
        "variant": searcher.variant.value if isinstance(searcher, AshaSearcher) else None,
        "unit": unit,
        "max_length": config.max_length.value if config.max_length else None,
        "brackets": brackets,
        "total_trials": sum(b["trials"] for b in brackets),
        "total_units": sum(b["units"] for b in brackets),
    }


def render_preview(preview: dict[str, Any]) -> str:
    """Plain-text table of a ``preview_search`` result."""
    unit = preview["unit"]
    title = preview["searcher"] + (f" ({preview['variant']})" if preview["variant"] else "")
    lines = [f"searcher: {title}", ""]
    header = f"{'bracket':>7}  {'rung':>4}  {'length':>10}  {'reach':>6}  {'end here':>8}"
    lines += [header, "-" * len(header)]
    for b in preview["brackets"]:
        for i, r in enumerate(b["rungs"]):
            lines.append(f"{b['bracket']:>7}  {i:>4}  {r['length']:>10}  "
                         f"{r['trials_reaching']:>6}  {r['trials_ending']:>8}")
    lines += ["", f"trials: {preview['total_trials']}",
              f"total training: {preview['total_units']} {unit}"]
    for b in preview["brackets"]:
        for r in b["rungs"]:
            if r["trials_ending"]:
                lines.append(f"  bracket {b['bracket']}: {r['trials_ending']} trial(s) "
                             f"train for {r['length']} {unit}")
    return "\n".join(lines) + "\n"
