"""Which Slurm test file a lane runs next (each lane: one xdist worker on its own dev
cluster, see docs/testing.md).

Owns: ``next_file`` -- a lane of Debian's release that needs work takes the longest file
not yet taken (longest-processing-time first, taken when a lane runs low, so the lanes
end together however the machine's load shifts their pace), by the committed per-file
seconds in ``tests/slurm/durations.json`` (a file not listed counts ``DEFAULT_S``) -- and
refreshing that file from a run's JUnit XML (``python -m tests.slurm_lanes JUNIT.xml``:
setup + call + teardown of each test, summed per file).
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


def next_file(files: Iterable[str], durations: Mapping[str, float]) -> str | None:
    """The longest of ``files`` by ``durations`` (ties: by name); None when empty."""
    return min(files, key=lambda f: (-durations.get(f, DEFAULT_S), f), default=None)


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
                 "(python -m tests.slurm_lanes JUNIT.xml); tests/conftest.py hands the "
                 "files to the lanes longest first by these", "source": Path(argv[0]).name,
        "files": files}, indent=1) + "\n")
    print(f"{len(files)} files, {sum(files.values()):.0f} s -> {DURATIONS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
