"""Incremental reading of the JSON-lines files jobs write (metrics.jsonl, exits.jsonl).

Owns: reading complete lines from a stored byte offset (a last line without its
newline is still being written and is left for the next tick), and parsing
them into records; ``ends_mid_line``, which the writers ask before appending, and
``append_record``, the writers' append of one record.
Must not: touch the store (the daemon stores offsets and records in one transaction,
so a crash re-reads, never skips).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: most bytes read from one file per tick (keeps a tick short after a long outage)
MAX_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True)
class Chunk:
    records: list[dict[str, Any]]
    new_offset: int


def ends_mid_line(path: Path) -> bool:
    """Whether ``path`` ends inside a line (a writer killed mid-write cut it short).
    Writers append a newline first then, so their record starts on a line of its own
    and ``read_new_lines`` skips the cut line alone."""
    try:
        with open(path, "rb") as f:
            if f.seek(0, os.SEEK_END) == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except FileNotFoundError:
        return False


def append_record(path: Path, rec: dict[str, object]) -> None:
    """Append one JSON line; a last line cut by a kill mid-write (no newline) is closed
    first, so it cannot swallow this record (the reader skips the cut line alone)."""
    with open(path, "ab") as fh:
        if ends_mid_line(path):
            fh.write(b"\n")
        fh.write((json.dumps(rec) + "\n").encode())


def read_new_lines(path: Path, offset: int, max_bytes: int = MAX_CHUNK) -> Chunk:
    """Complete JSON lines of ``path`` after ``offset``. Bad lines are logged and skipped."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(max_bytes)
    except FileNotFoundError:
        return Chunk([], offset)
    end = data.rfind(b"\n")
    if end < 0:
        return Chunk([], offset)
    records: list[dict[str, Any]] = []
    for raw in data[: end + 1].splitlines():
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError:
            log.warning("skipping a malformed line in %s: %r", path, raw[:200])
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return Chunk(records, offset + end + 1)


def metric_value(metrics: dict[str, Any], name: str) -> float | None:
    """The searcher metric from a validation record (None when missing or not a number)."""
    value = metrics.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
