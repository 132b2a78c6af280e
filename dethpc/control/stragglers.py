"""Which rank of a multi-rank trial holds the others up (``slurm.stragglers``).

Owns: reading the ranks' step-time files (``TrialPaths.ranks``, written by
``dethpc.core._steps``) and ``find_straggler``, the rule: among the ranks of the trial's
latest run (the job and run of the newest report) that have reported at least
``MIN_STEPS`` steps, the rank with the largest
busy time per step (its own work, outside the gradient all-reduce) is the straggler when
it is more than ``behind_pct`` percent over the median of all those ranks' busy times
(the median of an even count is the mean of the middle two). Fewer than two ranks, a
median of 0, or ``behind_pct`` 0: none.
Must not: write anything, or act on a straggler (it is shown in ``describe`` and the
dashboard; what to do about a slow node is the user's or admin's call).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: a rank is compared once it has reported this many steps of the run
MIN_STEPS = 5


@dataclass(frozen=True)
class RankTime:
    """One rank's latest report."""

    rank: int
    node: str
    run: int
    steps: int
    busy_s: float
    step_s: float
    at: float
    #: the Slurm job id ("" without Slurm): a trial restarted in a new job counts its
    #: runs from 0 again
    job: str = ""


@dataclass(frozen=True)
class Straggler:
    """The slowest rank of a run, and by how much."""

    rank: int
    node: str
    run: int
    busy_s: float
    median_busy_s: float
    behind_pct: float
    ranks: int
    at: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return (f"rank {self.rank} on {self.node}: {self.busy_s * 1000:.0f} ms of its own "
                f"work per step, {self.behind_pct:.0f}% over the median "
                f"({self.median_busy_s * 1000:.0f} ms) of {self.ranks} ranks")


def parse_rank_time(raw: Any) -> RankTime | None:
    """A rank file's object, or None when it lacks what the rule needs."""
    if not isinstance(raw, dict):
        return None
    try:
        busy, step = raw.get("busy_s"), raw.get("step_s")
        if busy is None or step is None:
            return None
        return RankTime(rank=int(raw["rank"]), node=str(raw.get("node") or "?"),
                        run=int(raw.get("run") or 0), steps=int(raw.get("steps") or 0),
                        busy_s=float(busy), step_s=float(step), at=float(raw.get("at") or 0),
                        job=str(raw.get("job") or ""))
    except (KeyError, TypeError, ValueError):
        return None


def read_rank_times(directory: Path) -> list[RankTime]:
    """Every readable rank file in ``directory`` (none when it does not exist)."""
    try:
        files = sorted(directory.glob("*.json"))
    except OSError:
        return []
    out = []
    for f in files:
        try:
            found = parse_rank_time(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
        if found is not None:
            out.append(found)
    return out


def find_straggler(times: Iterable[RankTime], behind_pct: float) -> Straggler | None:
    """The straggler of the latest run among ``times``, or None (module docstring)."""
    if behind_pct <= 0:
        return None
    seen = [t for t in times if t.steps >= MIN_STEPS]
    if not seen:
        return None
    newest = max(seen, key=lambda t: t.at)
    run = newest.run
    ranks = {t.rank: t for t in seen if (t.job, t.run) == (newest.job, run)}
    if len(ranks) < 2:
        return None
    import statistics  # here: its imports (decimal, fractions, random) only when ranks compare

    median = statistics.median(t.busy_s for t in ranks.values())
    if median <= 0:
        return None
    slow = max(ranks.values(), key=lambda t: (t.busy_s, -t.rank))
    pct = (slow.busy_s - median) / median * 100.0
    if pct <= behind_pct:
        return None
    return Straggler(rank=slow.rank, node=slow.node, run=run, busy_s=slow.busy_s,
                     median_busy_s=median, behind_pct=round(pct, 1), ranks=len(ranks),
                     at=max(t.at for t in ranks.values()))
