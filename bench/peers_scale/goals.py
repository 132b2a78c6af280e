"""The issue's goals (issue 48, item 9), computed from a run's ``summary``: never asserted.

Owns ``goals(summary)``: for each dethpc system (``dethpc-pool`` and ``dethpc-per-job``,
separately), each goal ``met``, ``missed`` or ``not measured``, with the figures it was
decided on. The goals, at 64+ GPUs:

* ``no_trials_lost``: 0 trials lost under faults (``<dethpc>+faults``);
* ``no_human_actions``: 0 human actions under faults;
* ``redone_half_of_best_peer``: GPU-hours redone under faults (per seed: a cell's figure
  is its seeds' sum) at most half the best (lowest) peer's; beside it, not deciding it,
  the same on the GPU-hours thrown away (``gpu_hours_thrown``: done again or not, where
  a peer that never resumed its killed trials shows them);
* ``time_to_target_within_5pct``: without faults, the median time to target at most
  1.05 x the best peer's;
* ``time_to_target_ahead_under_faults``: under faults, strictly below every peer's;
* ``lowest_rpcs_per_trial`` / ``lowest_peak_rpcs_per_s``: in each fault mode measured, no
  peer lower (a tie counts as lowest).

A peer is every system in the summary that is not dethpc (the other dethpc mode is not
its peer). A goal is ``not measured`` -- never met -- when a cell it needs is missing (a
run with faults only has no plain cells), has a figure of ``None``, has fewer than 64
GPUs, is a fault cell whose injections Slurm refused (``faults_refused`` > 0: the
faults did not happen as described; a preemption the cell's end cut short,
``faults_cut_short``, is not one: the cell was over), or no peer cell exists to compare
with. A peer's
cell that cannot be used is left out of the comparison. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

DETHPC = ("dethpc-pool", "dethpc-per-job")
MIN_GPUS = 64
FAULTS = "+faults"
MET, MISSED, NOT_MEASURED = "met", "missed", "not measured"

Summary = Mapping[str, Mapping[str, Any]]

#: goal id -> what it says (the table prints it)
GOALS: dict[str, str] = {
    "no_trials_lost": "0 trials lost under faults",
    "no_human_actions": "0 human actions under faults",
    "redone_half_of_best_peer": "GPU-hours redone under faults at most half the best peer's",
    "time_to_target_within_5pct": "time to target within 5% of the best peer without faults",
    "time_to_target_ahead_under_faults": "time to target ahead of every peer under faults",
    "lowest_rpcs_per_trial": "lowest RPCs per trial of all systems",
    "lowest_peak_rpcs_per_s": "lowest peak RPC rate of all systems",
}


def base_system(cell: str) -> str:
    return cell[: -len(FAULTS)] if cell.endswith(FAULTS) else cell


def peer_cells(summary: Summary, faults: bool) -> dict[str, Mapping[str, Any]]:
    """The peers' cells of one fault mode, by system."""
    return {base_system(c): v for c, v in summary.items()
            if c.endswith(FAULTS) == faults and base_system(c) not in DETHPC}


def _result(goal: str, status: str, why: str, **figures: Any) -> dict[str, Any]:
    return {"goal": goal, "says": GOALS[goal], "status": status, "why": why,
            "figures": figures}


def _cell(summary: Summary, cell: str) -> tuple[Mapping[str, Any] | None, str]:
    """The cell if the goals may use it, else ``(None, why not)``."""
    c = summary.get(cell)
    if c is None:
        return None, f"no {cell} cell in the summary"
    gpus = c.get("gpus")
    if not isinstance(gpus, int | float) or gpus < MIN_GPUS:
        return None, f"{cell} ran on {gpus} GPUs (the goals are at {MIN_GPUS}+)"
    if cell.endswith(FAULTS) and c.get("faults_refused"):
        return None, (f"{cell}: {c['faults_refused']} fault injections refused (the "
                      "schedule did not run as described)")
    return c, ""


def _per_seed(cell: Mapping[str, Any], key: str) -> float | None:
    """A summed figure per seed (cells may differ in their number of seeds)."""
    v = cell.get(key)
    return None if v is None else float(v) / max(1, len(cell.get("seeds") or [0]))


def _zero(summary: Summary, system: str, goal: str, key: str) -> dict[str, Any]:
    cell = system + FAULTS
    c, why = _cell(summary, cell)
    if c is None:
        return _result(goal, NOT_MEASURED, why)
    if c.get(key) is None:
        return _result(goal, NOT_MEASURED, f"{cell} has no {key}")
    v = c[key]
    return _result(goal, MET if v == 0 else MISSED, f"{cell}: {key} = {v}",
                   **{system: v})


def _versus_peers(summary: Summary, system: str, goal: str, faults: bool,
                  value: Callable[[Mapping[str, Any]], float | None],
                  meets: Callable[[float, float], bool], label: str) -> dict[str, Any]:
    """``meets(dethpc's value, the best (lowest) peer's value)``, the best peer chosen
    among the peers of the fault mode whose cells hold the figure."""
    cell = system + (FAULTS if faults else "")
    c, why = _cell(summary, cell)
    if c is None:
        return _result(goal, NOT_MEASURED, why)
    mine = value(c)
    if mine is None:
        return _result(goal, NOT_MEASURED, f"{cell} has no {label}")
    peers: dict[str, float] = {}
    for name, pc in peer_cells(summary, faults).items():
        usable = _cell(summary, name + (FAULTS if faults else ""))[0] is not None
        pv = value(pc) if usable else None
        if pv is not None:
            peers[name] = pv
    if not peers:
        return _result(goal, NOT_MEASURED,
                       f"no peer cell {'with' if faults else 'without'} faults to compare")
    best = min(peers, key=lambda n: peers[n])
    ok = meets(mine, peers[best])
    return _result(goal, MET if ok else MISSED,
                   f"{cell}: {label} {mine:g}; best peer {best}: {peers[best]:g}",
                   **{system: mine}, best_peer=best, peers=peers)


def _lowest(summary: Summary, system: str, goal: str, key: str) -> dict[str, Any]:
    """No peer lower, in every fault mode measured (a mode dethpc's cell lacks is left
    out; none measured: not measured)."""
    modes = [_versus_peers(summary, system, goal, f, lambda c: _num(c, key),
                           lambda mine, best: mine <= best, key) for f in (False, True)]
    measured = [m for m in modes if m["status"] != NOT_MEASURED]
    if not measured:
        return _result(goal, NOT_MEASURED, "; ".join(m["why"] for m in modes))
    status = MET if all(m["status"] == MET for m in measured) else MISSED
    return _result(goal, status, "; ".join(m["why"] for m in modes),
                   **{("faults" if f else "no_faults"): m["figures"]
                      for f, m in zip((False, True), modes, strict=True)
                      if m["status"] != NOT_MEASURED})


def _num(cell: Mapping[str, Any], key: str) -> float | None:
    v = cell.get(key)
    return None if v is None else float(v)


def _redone(summary: Summary, system: str) -> dict[str, Any]:
    """The redone goal as the issue words it; beside it (``figures["thrown"]``, the
    ``why``), the same comparison on the work thrown away, done again or not, where the
    cells hold it: a peer that never resumed its killed trials redid nothing, and its 0
    would otherwise be the best peer's figure. The status stays the worded goal's."""
    def half(mine: float, best: float) -> bool:
        return mine <= 0.5 * best

    r = _versus_peers(summary, system, "redone_half_of_best_peer", True,
                      lambda c: _per_seed(c, "gpu_hours_redone"), half,
                      "GPU-hours redone a seed")
    t = _versus_peers(summary, system, "redone_half_of_best_peer", True,
                      lambda c: _per_seed(c, "gpu_hours_thrown"), half,
                      "GPU-hours thrown away a seed")
    if r["status"] != NOT_MEASURED and t["status"] != NOT_MEASURED:
        r["why"] += f"; on the work thrown away, done again or not: {t['why']} " \
                    f"({t['status']} there)"
        r["figures"]["thrown"] = {"status": t["status"], **t["figures"]}
    return r


def system_goals(summary: Summary, system: str) -> list[dict[str, Any]]:
    return [
        _zero(summary, system, "no_trials_lost", "trials_lost"),
        _zero(summary, system, "no_human_actions", "human_actions"),
        _redone(summary, system),
        _versus_peers(summary, system, "time_to_target_within_5pct", False,
                      lambda c: _num(c, "time_to_target_median_s"),
                      lambda mine, best: mine <= 1.05 * best, "time to target (median, s)"),
        _versus_peers(summary, system, "time_to_target_ahead_under_faults", True,
                      lambda c: _num(c, "time_to_target_median_s"),
                      lambda mine, best: mine < best, "time to target (median, s)"),
        _lowest(summary, system, "lowest_rpcs_per_trial", "rpcs_per_trial"),
        _lowest(summary, system, "lowest_peak_rpcs_per_s", "peak_rpcs_per_s"),
    ]


def goals(summary: Summary) -> dict[str, Any]:
    """Per dethpc system its goals, and the counts of each status over all of them."""
    per = {system: system_goals(summary, system) for system in DETHPC}
    counts = {s: sum(g["status"] == s for gs in per.values() for g in gs)
              for s in (MET, MISSED, NOT_MEASURED)}
    return {"min_gpus": MIN_GPUS, "systems": per, "counts": counts}
