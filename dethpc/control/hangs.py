"""Hung trials: how long a running trial may show no progress, and whether it has.

Owns: ``RunWatch`` (what the daemon saw of one running run: since when it runs, its
newest progress mark, the trial's longest gap between marks), ``observe`` (a new mark
seen: the gap it closes), ``allowance`` (the idle seconds a run gets: before its first
mark ``startup_s``; after, ``max_idle_s`` or ``auto``, at most the site's cap) and
``judge`` (idle past the allowance: hung). Pure; the daemon's ``Watchdog`` gathers the
marks (``metrics.jsonl`` and the ``heartbeat`` file's modification times) and acts.
``auto`` is ``AUTO_GAPS`` times the longest gap the daemon saw between the trial's
marks, at least ``AUTO_FLOOR_S``: a trial that reports every 10 s is hung after 10
minutes of silence, one whose validations take 30 minutes after 5 hours.
Must not: read files, touch the store or call a backend.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dethpc.config.model import Watchdog

#: ``auto`` allows this many times the trial's longest gap between progress marks ...
AUTO_GAPS = 10.0
#: ... and never less than this
AUTO_FLOOR_S = 600.0
#: the ranks get this long to write their stacks before the hung job's steps are killed
DUMP_WAIT_S = 10.0
#: a hung job still running this long after the verdict (its batch shell did not end
#: it after its steps were killed) is cancelled
CANCEL_WAIT_S = 60.0


@dataclass(frozen=True)
class RunWatch:
    """The daemon's view of one running run of a trial's job."""

    run: int
    running_since: float          # the first tick that saw this run RUNNING
    last_mark: float | None = None  # the newest progress mark of this run (None: none yet)
    longest_gap: float = 0.0      # the trial's longest gap between marks (all runs)


@dataclass(frozen=True)
class Hang:
    """A run judged hung: how long it was idle, and what it was allowed."""

    idle_s: float
    allowed_s: float
    started: bool                 # it had made progress in this run (else: stuck starting)


def observe(watch: RunWatch, mark: float) -> RunWatch:
    """``watch`` after the newest progress mark ``mark`` (a file's modification time);
    a mark older than the run's start, or not newer than the last one, changes nothing."""
    if mark <= watch.running_since or (watch.last_mark is not None
                                       and mark <= watch.last_mark):
        return watch
    gap = mark - watch.last_mark if watch.last_mark is not None else 0.0
    return replace(watch, last_mark=mark, longest_gap=max(watch.longest_gap, gap))


def allowance(policy: Watchdog, watch: RunWatch, cap_s: float = 0.0) -> float | None:
    """The idle seconds ``watch``'s run is allowed now; None: the watchdog is off."""
    if not policy.enabled:
        return None
    idle = (policy.max_idle_s if policy.max_idle_s is not None
            else max(AUTO_FLOOR_S, AUTO_GAPS * watch.longest_gap))
    allowed = idle if watch.last_mark is not None else max(policy.startup_s, idle)
    return min(allowed, cap_s) if cap_s > 0 else allowed


def judge(policy: Watchdog, watch: RunWatch, now: float, cap_s: float = 0.0) -> Hang | None:
    """The run is hung: idle (since its last mark, or its start) past its allowance."""
    allowed = allowance(policy, watch, cap_s)
    if allowed is None:
        return None
    since = watch.last_mark if watch.last_mark is not None else watch.running_since
    idle = now - since
    return Hang(idle, allowed, watch.last_mark is not None) if idle > allowed else None
