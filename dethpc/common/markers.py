"""Small files of the run directory that one side writes whole and another reads.

Owns: ``replace_text`` (a file's new text put in place by a rename from a temporary file
beside it: a reader sees the old text or the new, never half of it) and
``read_searched`` (the length in a trial's ``searched`` marker, written by the daemon
and waited for by the trial: ``TrialPaths.searched``) and ``run_mark`` (a JSON marker
that names one run of one job: ``rehearsal.json``, ``hung.json``).
Must not: know where the files live (``dethpc.common.paths`` does), or fsync: what it
writes is a queue entry or a marker that its writer writes again, not data a crash may
lose.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def replace_text(path: Path, text: str) -> None:
    """Write ``text`` to ``.<name>.<pid>.tmp`` beside ``path``, then rename it over
    ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_searched(path: Path) -> int:
    """The length in a trial's ``searched`` marker; 0 when it is missing or unreadable."""
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def run_mark(path: Path, ref: str, run: int) -> dict[str, Any] | None:
    """A JSON marker that names one run of one job (``{"job", "run", ...}``:
    ``rehearsal.json``, ``hung.json``), when it names run ``run`` of job ``ref``; None
    when it is missing, unreadable, or another job's or run's."""
    try:
        mark = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(mark, dict) and mark.get("job") == ref and mark.get("run") == run:
        return mark
    return None
