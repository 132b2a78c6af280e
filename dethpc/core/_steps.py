"""Each rank's own time per step in a multi-rank trial: what the straggler view compares.

Owns: ``StepTimes``, one per rank of a trial with more than one rank. The training loop
(``dethpc.pytorch``'s Trainer) gives it each step's wall seconds and its *busy* seconds:
the rank's own work (loading its batch, ``train_batch``) without the time spent where
DDP makes a fast rank wait for the slowest -- inside ``backward()`` (the gradient
all-reduce) and at the head of the wrapped model's forward (its buffer broadcast) -- so
that, where every rank's wall time per step is the same, the busy time tells which rank
holds the others up. It keeps the last ``WINDOW`` steps and replaces
``<trial>/ranks/<rank>.json`` at most every ``REPORT_S`` and when the loop ends:
``{"rank", "world", "node", "job", "run", "steps", "busy_s", "step_s", "at"}`` (medians
of the window; ``steps``: this run's steps so far; ``job``: the Slurm job id, "" without
Slurm, since a trial restarted in a new job starts its runs at 0 again).
Must not: import torch, judge ranks (``dethpc.control.stragglers`` does), or write any
other file.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections import deque
from pathlib import Path

from dethpc.common.markers import replace_text

log = logging.getLogger(__name__)

#: steps each rank's medians are taken over
WINDOW = 50
#: how often (at most) a rank replaces its file; its first write comes after ``FIRST``
#: steps
REPORT_S = 5.0
FIRST = 5


class StepTimes:
    """One rank's recent step times, written to its file in the trial's ``ranks/``."""

    def __init__(self, path: Path, *, rank: int, world: int, node: str, run: int,
                 job: str = "") -> None:
        self.path = path
        self.rank, self.world, self.node, self.run, self.job = rank, world, node, run, job
        self._busy: deque[float] = deque(maxlen=WINDOW)
        self._wall: deque[float] = deque(maxlen=WINDOW)
        self.steps = 0
        self._last_write = float("-inf")
        self._broken = False

    def add(self, busy_s: float, step_s: float) -> None:
        """One step: its busy and wall seconds. Writes the file when it is due."""
        self._busy.append(max(0.0, busy_s))
        self._wall.append(max(0.0, step_s))
        self.steps += 1
        now = time.monotonic()
        if self.steps >= FIRST and now - self._last_write >= REPORT_S:
            self._last_write = now
            self.write()

    def record(self) -> dict[str, object]:
        """What the file holds now (after at least one step)."""
        return {"rank": self.rank, "world": self.world, "node": self.node, "job": self.job,
                "run": self.run, "steps": self.steps,
                "busy_s": round(statistics.median(self._busy), 6),
                "step_s": round(statistics.median(self._wall), 6),
                "at": round(time.time(), 3)}

    def write(self) -> None:
        """Replace the rank's file (a failure is logged once; training goes on); nothing
        before the first step."""
        if not self._busy or self._broken:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            replace_text(self.path, json.dumps(self.record()) + "\n")
        except OSError as exc:
            self._broken = True
            log.warning("cannot write step times to %s: %s (the straggler view will not "
                        "show this rank)", self.path, exc)
