"""Which Slurm test file runs in which lane (each lane: one xdist worker on its own
dev cluster, see docs/testing.md).

Owns: the lane plan -- ``plan_lanes``: every file under tests/slurm/ in exactly one lane,
longest first onto the lane with the least estimated time so far (ties: the lower
lane), from the committed per-file seconds in ``tests/slurm/durations.json``; a file
not listed there counts ``DEFAULT_S`` -- and refreshing that file from a run's JUnit
XML (``python -m tests.slurm_lanes JUNIT.xml``: setup + call + teardown of each test,
summed per file).
Must not: know xdist's workers or clusters (tests/conftest.py binds a lane to a worker
and the worker to the lane's cluster), or import pytest plugins.
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from pathlib import Path

DURATIONS = Path(__file__).resolve().parent / "slurm" / "durations.json"
#: seconds assumed for a Slurm test file that durations.json does not list yet
DEFAULT_S = 60.0


def read_durations(path: Path = DURATIONS) -> dict[str, float]:
    """``{"tests/slurm/test_x.py": seconds}``; empty when the file is missing."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in raw.get("files", {}).items()}


def plan_lanes(files: Iterable[str], lanes: int,
               durations: Mapping[str, float]) -> dict[str, int]:
    """``{file: lane}`` (lanes 1..``lanes``), greedy longest-processing-time first."""
    unique = list(dict.fromkeys(files))
    load = dict.fromkeys(range(1, max(1, lanes) + 1), 0.0)
    plan: dict[str, int] = {}
    for f in sorted(unique, key=lambda f: (-durations.get(f, DEFAULT_S), f)):
        lane = min(load, key=lambda k: (load[k], k))
        plan[f] = lane
        load[lane] += durations.get(f, DEFAULT_S)
    return plan


def lane_estimates(plan: Mapping[str, int], durations: Mapping[str, float]) -> dict[int, float]:
    """Estimated seconds of each lane of ``plan``."""
    out: dict[int, float] = {}
    for f, lane in plan.items():
        out[lane] = out.get(lane, 0.0) + durations.get(f, DEFAULT_S)
    return dict(sorted(out.items()))


#: a spanning test's variant for a release beside Debian's 22.05 (its own lane, not planned)
_OTHER_RELEASE = re.compile(r"\[(?:.*-)?slurm-(?!22\.05)\d+\.\d+(?:-.*)?\]$")


def durations_from_junit(xml_path: Path) -> dict[str, float]:
    """Per-file seconds of tests/slurm/ in a JUnit XML (pytest ``--junitxml``), without
    the spanning tests' variants for other releases (they run in those releases' lanes)."""
    files: dict[str, float] = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        if parts[:2] != ["tests", "slurm"] or len(parts) < 3:
            continue
        if _OTHER_RELEASE.search(case.get("name") or ""):
            continue
        name = f"tests/slurm/{parts[2]}.py"
        files[name] = round(files.get(name, 0.0) + float(case.get("time") or 0.0), 1)
    return dict(sorted(files.items()))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: python -m tests.slurm_lanes JUNIT.xml  (rewrites {DURATIONS})",
              file=sys.stderr)
        return 2
    files = durations_from_junit(Path(argv[0]))
    DURATIONS.write_text(json.dumps({
        "about": "seconds per Slurm test file (setup+call+teardown), from a run's JUnit XML "
                 "(python -m tests.slurm_lanes JUNIT.xml); tests/conftest.py splits the "
                 "files into lanes by these", "source": Path(argv[0]).name,
        "files": files}, indent=1) + "\n")
    print(f"{len(files)} files, {sum(files.values()):.0f} s -> {DURATIONS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
