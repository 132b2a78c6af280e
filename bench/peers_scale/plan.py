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
per-cell overhead.
Pure: no clock, no Slurm, no files (the caller reads the reference runs).
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


#: the teardown of the systems whose stop waits on a login-side process (Hydra's
#: multirun, submitit's driver: up to 30 s each), measured with the SIGKILL teardown
#: (peers_scale_budget.json: 31.5 and 23.0 s after a 70 s plain cell), and Ray's (its
#: allocation's scancel): the quick run's gap after its TIMEOUT, 31.7 s, measured before
#: the SIGKILL teardown (an upper bound until measured with it)
PEER_TEARDOWN_S: dict[str, float] = {"hydra-optuna": 32.0, "submitit": 24.0,
                                     "ray-tune": 32.0}


@dataclass(frozen=True)
class Costs:
    """Seconds a cell costs outside its search (the driver's own work). Defaults: the
    most of the two cells measured for the budget (bench/results/
    peers_scale_budget.json, dethpc-pool plain and with faults: set-up 1.8 / 3.7 s, the
    background's first jobs and the launch until the first sbatch; teardown 7.6 / 5.7 s,
    the injector's, the system's and the samplers' stops, clearing the queue, sacct and
    the work count), rounded up; ``teardown_by_system`` where a system's own stop is
    slower (``PEER_TEARDOWN_S``)."""

    setup_s: float = 4.0
    teardown_s: float = 8.0
    teardown_by_system: Mapping[str, float] = field(
        default_factory=lambda: dict(PEER_TEARDOWN_S))
    #: bench/peers' driver per cell (waits for an empty queue, sacct's polls, daemons):
    #: 2.4 s measured (one plain seed: 336 s for cells that ended after 321 s in all)
    small_cell_s: float = 5.0

    def per_cell_s(self, system: str) -> float:
        return self.setup_s + self.teardown_by_system.get(system, self.teardown_s)


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
                f"{self.margin_s / 60:.0f} min margin: {verdict}")


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
                                         search + costs.per_cell_s(system),
                                         d is None or d >= limit))
    small = 0.0
    n_small = 0
    for faults in regime.small_modes if regime.small_seeds else ():
        for system in regime.small_systems:
            wall = ref.small_walls.get((system, faults))
            if wall is None:
                raise ValueError(f"no small-cell reference for {system} "
                                 f"(faults {faults}): measure one seed first")
            small += regime.small_seeds * (min(wall, regime.small_timeout_s)
                                           + costs.small_cell_s)
            n_small += regime.small_seeds
    total = sum(c.total_s for c in cells) + small
    return Plan(cells, small, n_small, total, regime.budget_s, regime.margin_s)
