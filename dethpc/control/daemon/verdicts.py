"""The searcher's verdicts, told to the trials waiting at a rung.

Owns: ``write_searched`` -- each trial's ``searched`` marker (``TrialPaths.searched``:
the longest validation its searcher has taken), written after the transaction that
took it committed, atomically (a temporary file renamed), never going back. A trial
that reported a validation at a rung waits for it (or its stop file) before training
on (``dethpc.core``'s ``PreemptContext.await_verdict``): a stop then lands at the rung,
not one validation period later.
Must not: decide anything, or fail a tick: a marker that cannot be written costs the
waiting trial its wait bound, nothing more.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from dethpc.common.markers import read_searched, replace_text

log = logging.getLogger(__name__)


def write_searched(marks: Mapping[str, int]) -> None:
    """Write each marker (path -> length) unless it already says as much."""
    for name, length in marks.items():
        path = Path(name)
        if read_searched(path) >= length:
            continue
        try:
            replace_text(path, f"{length}\n")
        except OSError as exc:
            log.warning("cannot write %s: %s (the trial waits out its bound)", path, exc)
