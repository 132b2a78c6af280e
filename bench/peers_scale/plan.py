"""How long a peers-at-scale run will take, before it starts (issue 48, item 6: the whole
table in 150 minutes of this machine, a ``--quick`` run in 20).

Owns ``Regime`` (what a run asks: systems, seeds, fault modes, each mode's cell timeout,
the time-scale, the small cell's seeds and modes), ``Costs`` (what a cell costs besides
its search: the driver's set-up before the launch and its teardown after the cell's end,
measured), the expected seconds until a system has decided every trial (``decided_s``,
from a measured run's raw cells, scaled to the regime's time-scale) and ``plan``: every
cell's expected wall, the total and whether it fits the budget.

The model, from the quick run of 6ee9a6f (``bench/results/peers_scale_quick.json``,
time-scale 0.25, faults on, timeout 480; its worklogs): a cell lasts until the system
decided every trial or its timeout, whichever is first, plus the driver's set-up and
teardown. A system that decided every trial in the reference run at ``D0`` seconds is
expected to decide at ``D0 x (1 - STEP_SHARE + STEP_SHARE x scale / ref_scale)``: only
the steps scale, not the start-ups (10 s a trial process), queue waits and fault
downtimes. ``STEP_SHARE`` 0.4 is the step seconds' share of dethpc-pool's critical path
there: its last-decided trial (237) started at 194 s and stepped 137 s of its 254 s
(0.54), the 194 s before it are mostly rung-1 start-ups (4 steps of ~0.5 s after a 10 s
start: ~0.2). A system that did not decide every trial by the reference timeout is
expected to reach every shorter timeout. A plain (no-fault) cell without its own
reference is expected to take its fault cell's time (faults only slow a search: an upper
bound). The small cell (bench/peers: real CNN training, 32 trials, 2 at once, one
invocation per fault mode) is expected to take, per seed and mode, its cells' median
walls in ``bench/results/peers.json`` (at most its cell timeout) plus its driver's
per-cell overhead (``Costs.small_cell_s``), plus once per invocation its start and end.
bench/peers reads a search's jobs as its watcher user (``dethpc-user``: the wait for an
Optuna or Ray search's array, the check for an empty queue, ``sacct``). Where that user
does not exist (``Regime.small_watcher`` False: it is created by the Slurm tests'
``ensure_user``, not by the dev cluster's ``up``) every command as that user prints nothing:
the Optuna and Ray cells' wait ends at once, and every cell's ``sacct`` poll waits its
whole 120 s timeout for rows that never come (``Costs.small_blind_s``). The full table
of 3b8f039 ran so: its small cell took 77.2 minutes where 28.6 were planned, each of
its 30 cells 119-122 s longer than its search (bench/results/peers_scale.json, and the
cluster's own sacct of the cells).
Pure: no clock, no Slurm, no files (the caller reads the reference runs and whether the
watcher exists).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: minutes of this machine the issue allows: the whole table, and a quick run
BUDGET_FULL_S = 150 * 60.0
BUDGET_QUICK_S = 20 * 60.0
#: what the plan must leave of them (other work on the machine, the plots, the table)
MARGIN_S = 10 * 60.0
MARGIN_QUICK_S = 1 * 60.0
#: the step seconds' share of a decided cell's wall (module doc)
STEP_SHARE = 0.4
FAULTS = "+faults"


#: a cell's teardown where the system's own stop is slower than the driver's (Hydra's
#: multirun and submitit's driver: their runner's SIGTERM, up to 30 s; Ray's allocation),
#: keyed by cell (``system`` or ``system+faults``; a system's plain figure stands for its
#: fault cell when that has none): the median of the 3 seeds of the full table at
#: 3b8f039 (bench/results/peers_scale.json ``phases.teardown_s``), rounded up. In a fault
#: cell the crashes and the login kill have often ended the peer's own process already
#: (Ray 1.2-1.7 s, Hydra 11.6-21.3 s, submitit 5.5-30.7 s)
PEER_TEARDOWN_S: dict[str, float] = {"hydra-optuna": 31.0, "hydra-optuna+faults": 22.0,
                                     "submitit": 22.0, "submitit+faults": 11.0,
                                     "ray-tune": 31.0, "ray-tune+faults": 2.0}
#: the small cell's systems whose end bench/peers reads through its watcher's squeue
#: (``wait_jobs_gone`` on the array / the allocation): blind, they end at once
SMALL_WATCHED_END = frozenset({"optuna", "ray"})


@dataclass(frozen=True)
class Costs:
    """Seconds a cell costs outside its search (the driver's own work). Defaults: the full
    table at 3b8f039 (bench/results/peers_scale.json, 42 cells' ``phases``): set-up plus
    the search loop's overrun of its timeout (its 1 s poll), median 1.05 s (max 2.0);
    teardown (the injector's, the system's and the samplers' stops, clearing the queue,
    sacct and the work count) 3.8-6.8 s for dethpc and Optuna, rounded up;
    ``teardown_by_system`` where a system's own stop is slower (``PEER_TEARDOWN_S``,
    keyed by cell or system)."""

    setup_s: float = 1.0
    teardown_s: float = 6.0
    teardown_by_system: Mapping[str, float] = field(
        default_factory=lambda: dict(PEER_TEARDOWN_S))
    #: bench/peers' driver a cell, its watcher present: the wait for the last jobs to
    #: leave after a timeout, the poll for their sacct rows, the empty-queue check and
    #: sdiag: 7.0 s measured (one dethpc-per-job cell at its 60 s timeout, 2026-12-02
    #: 22:34: 67.0 s for the whole invocation, its search 64.5 s of it); a cell that
    #: ends alone pays less (2.4 s a cell, one plain seed of 6 cells, budget run)
    small_cell_s: float = 7.0
    #: ... its watcher missing: bench/peers' ``accounting`` polls sacct to its 120 s
    #: timeout in every cell (measured 119.0-122.0 s past the search, 30 of 30 cells)
    small_blind_s: float = 120.0
    #: ... and the rest of its driver then (the daemon's stop, sdiag): 0-2 s measured
    small_blind_rest_s: float = 1.0
    #: once per bench/peers invocation: its start (imports, the first cell's queue
    #: check) and end (the limit's simulation, versions): ~2 s measured, rounded up
    small_invocation_s: float = 5.0

    def per_cell_s(self, system: str, faults: bool = False) -> float:
        by = self.teardown_by_system
        cell = f"{system}{FAULTS if faults else ''}"
        return self.setup_s + by.get(cell, by.get(system, self.teardown_s))

    def small_s(self, system: str, wall: float, timeout_s: float, watcher: bool) -> float:
        """One small cell: its search (``wall``, at most ``timeout_s``) and the driver's
        seconds around it; without the watcher (module doc) a system whose end is read
        through it has no search of its own, and every cell pays the sacct timeout."""
        if watcher:
            return min(wall, timeout_s) + self.small_cell_s
        search = 0.0 if system in SMALL_WATCHED_END else min(wall, timeout_s)
        return search + self.small_blind_s + self.small_blind_rest_s


@dataclass(frozen=True)
class Regime:
    systems: Sequence[str]
    seeds: Sequence[int]
    modes: Sequence[bool]                 # False: the plain cells, True: the fault cells
    timeout_s: float                      # a fault cell's limit
    plain_timeout_s: float                # a plain cell's limit
    time_scale: float
    small_seeds: int = 0
    small_timeout_s: float = 900.0
    small_modes: Sequence[bool] = (False, True)
    small_systems: Sequence[str] = ("dethpc-pool", "dethpc-per-job", "optuna", "ray",
                                    "submitit", "hydra")
    #: whether bench/peers' watcher user exists on this machine (module doc)
    small_watcher: bool = True
    quick: bool = False

    @property
    def budget_s(self) -> float:
        return BUDGET_QUICK_S if self.quick else BUDGET_FULL_S

    @property
    def margin_s(self) -> float:
        return MARGIN_QUICK_S if self.quick else MARGIN_S


@dataclass(frozen=True)
class Reference:
    """A measured run's cells: ``(system, faults) -> decided seconds`` (None: not every
    trial decided by ``timeout_s``), at ``time_scale``; and the small cell's median wall
    per ``(system, faults)``."""

    decided: Mapping[tuple[str, bool], float | None]
    time_scale: float
    timeout_s: float
    small_walls: Mapping[tuple[str, bool], float] = field(default_factory=dict)


def reference_from_runs(runs: Iterable[Mapping[str, Any]], params: Mapping[str, Any],
                        small_runs: Iterable[Mapping[str, Any]] = ()) -> Reference:
    """A ``Reference`` from a peers_scale doc's ``runs`` and ``params`` (the median over
    seeds of each cell's decided wall; a cell with an undecided seed is undecided) and
    bench/peers' ``runs`` (each cell's median wall)."""
    walls: dict[tuple[str, bool], list[float | None]] = {}
    for r in runs:
        m = r["metrics"]
        walls.setdefault((r["system"], bool(r["faults"])), []).append(
            m["wall_s"] if m.get("finished") else None)
    decided = {k: (None if any(w is None for w in v) else statistics.median(
        [w for w in v if w is not None])) for k, v in walls.items()}
    small: dict[tuple[str, bool], list[float]] = {}
    for r in small_runs:
        small.setdefault((r["system"], bool(r.get("faults"))), []).append(float(r["wall_s"]))
    return Reference(decided=decided, time_scale=float(params["time_scale"]),
                     timeout_s=float(params["timeout"]),
                     small_walls={k: statistics.median(v) for k, v in small.items()})


def decided_s(ref: Reference, system: str, faults: bool, time_scale: float) -> float | None:
    """When ``system`` is expected to have decided every trial at ``time_scale`` (None:
    not within any timeout up to the reference's; module doc)."""
    d0 = ref.decided.get((system, faults))
    if (system, faults) not in ref.decided and not faults:
        d0 = ref.decided.get((system, True))        # an upper bound (module doc)
    if d0 is None:
        return None
    return d0 * (1.0 - STEP_SHARE + STEP_SHARE * time_scale / ref.time_scale)


@dataclass(frozen=True)
class PlannedCell:
    cell: str
    seed: int
    search_s: float
    total_s: float
    reaches_timeout: bool


@dataclass(frozen=True)
class Plan:
    cells: list[PlannedCell]
    small_s: float
    small_cells: int
    total_s: float
    budget_s: float
    margin_s: float
    #: why the small cell is slower than its searches (a missing watcher), or ""
    small_note: str = ""

    @property
    def fits(self) -> bool:
        return self.total_s <= self.budget_s - self.margin_s

    def as_json(self) -> dict[str, Any]:
        return {"total_s": round(self.total_s), "total_min": round(self.total_s / 60, 1),
                "budget_min": self.budget_s / 60, "margin_min": self.margin_s / 60,
                "fits": self.fits, "scale_cells": len(self.cells),
                "scale_s": round(sum(c.total_s for c in self.cells)),
                "cells_to_timeout": sum(c.reaches_timeout for c in self.cells),
                "small_cells": self.small_cells, "small_s": round(self.small_s),
                **({"small_note": self.small_note} if self.small_note else {}),
                "cells": [{"cell": c.cell, "seed": c.seed, "search_s": round(c.search_s),
                           "total_s": round(c.total_s), "to_timeout": c.reaches_timeout}
                          for c in self.cells]}

    def text(self) -> str:
        to = sum(c.reaches_timeout for c in self.cells)
        verdict = "fits" if self.fits else "DOES NOT FIT"
        return (f"plan: {len(self.cells)} scale cells {sum(c.total_s for c in self.cells) / 60:.1f}"
                f" min ({to} expected to run to their timeout) + small cell "
                f"{self.small_cells} cells {self.small_s / 60:.1f} min = "
                f"{self.total_s / 60:.1f} min; budget {self.budget_s / 60:.0f} min less "
                f"{self.margin_s / 60:.0f} min margin: {verdict}"
                + (f"\n  small cell: {self.small_note}" if self.small_note else ""))


def plan(regime: Regime, ref: Reference, costs: Costs | None = None) -> Plan:
    """Every cell of ``regime`` in run order with its expected seconds (module doc)."""
    costs = costs or Costs()
    cells: list[PlannedCell] = []
    for seed in regime.seeds:
        for faults in regime.modes:
            limit = regime.timeout_s if faults else regime.plain_timeout_s
            for system in regime.systems:
                d = decided_s(ref, system, faults, regime.time_scale)
                search = limit if d is None else min(limit, d)
                cells.append(PlannedCell(f"{system}{FAULTS if faults else ''}", seed, search,
                                         search + costs.per_cell_s(system, faults),
                                         d is None or d >= limit))
    small = 0.0
    n_small = 0
    for faults in regime.small_modes if regime.small_seeds else ():
        for system in regime.small_systems:
            wall = ref.small_walls.get((system, faults))
            if wall is None:
                raise ValueError(f"no small-cell reference for {system} "
                                 f"(faults {faults}): measure one seed first")
            small += regime.small_seeds * costs.small_s(
                system, wall, regime.small_timeout_s, regime.small_watcher)
            n_small += regime.small_seeds
        small += costs.small_invocation_s
    total = sum(c.total_s for c in cells) + small
    note = "" if regime.small_watcher or not n_small else (
        f"bench/peers' watcher user is missing: every cell waits {costs.small_blind_s:.0f} s "
        "for sacct rows it cannot read (create it as root: python -c 'from "
        "dethpc.devcluster.users import ensure_user; ensure_user()')")
    return Plan(cells, small, n_small, total, regime.budget_s, regime.margin_s, note)
