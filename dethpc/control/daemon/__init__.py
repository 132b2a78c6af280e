"""The daemon: one reconcile loop of idempotent ticks (``loop.Daemon``).

Owns: the daemon; the names callers import from ``dethpc.control.daemon`` (re-exported
here).
Must not: be imported back by its own modules (they import each other by module path).
"""

from dethpc.control.daemon.loop import Daemon, pull_failed
from dethpc.control.daemon.shared import (
    OPEN_STATES,
    LeaseLost,
    TickStats,
    fault_point,
    slurm_unreachable,
)
from dethpc.control.daemon.watch import Watched, backoff_s, grown_files, next_delay

__all__ = ["OPEN_STATES", "Daemon", "LeaseLost", "TickStats", "Watched", "backoff_s",
           "fault_point", "grown_files", "next_delay", "pull_failed", "slurm_unreachable"]
