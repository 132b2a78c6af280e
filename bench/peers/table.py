"""The Markdown table of bench/peers/README.md (and the README's headline), from a
``run.py`` result: ``python bench/peers/table.py [bench/results/peers.json]``.

Owns: turning ``summary`` and ``limit`` into rows, one per system, medians over the
seeds (min-max of the time to target in brackets), the limit's row last.
Must not: measure anything.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _s(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def table(result: dict[str, Any]) -> str:
    head = ("| system | time to target, median (min-max) | reached | efficiency | wall | "
            "slot-s held | slurmctld RPCs/min | login CPU s | batches trained | jobs | "
            "files left |")
    lines = [head, "|" + " --- |" * head.count(" | ") + " --- |"]
    for name, s in result["summary"].items():
        lines.append(
            f"| `{name}` | {_s(s['time_to_target_median_s'])} s "
            f"({_s(s['time_to_target_min_s'])}-{_s(s['time_to_target_max_s'])}) | "
            f"{s['reached_target']}/{s['seeds']} | {_s(s['efficiency_vs_limit'], '{:.2f}')} | "
            f"{_s(s['wall_median_s'])} s | {_s(s['slot_seconds_median'], '{:.0f}')} | "
            f"{_s(s['rpcs_per_min_median'], '{:.0f}')} | {_s(s['login_cpu_s_median'])} | "
            f"{_s(s['batches_trained_median'], '{:.0f}')} | {_s(s['jobs_median'], '{:.0f}')} | "
            f"{_s(s['disk_files_median'], '{:.0f}')} |")
    for name, lim in result["limit"].items():
        if not isinstance(lim, dict):       # the seeds the limits were drawn for
            continue
        tt = [x for x in lim["time_to_target_s"] if x is not None]
        lines.append(f"| limit: {name.replace('_', ' ')}, every cost 0 | "
                     f"{_s(statistics.median(tt) if tt else None)} s "
                     f"({_s(min(tt) if tt else None)}-{_s(max(tt) if tt else None)}) | "
                     f"{len(tt)}/{len(lim['time_to_target_s'])} | | "
                     f"{_s(statistics.median(lim['total_time_s']))} s | | | | | | |")
    return "\n".join(lines)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "bench/results/peers.json"
    print(table(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
