"""The daemon: one reconcile loop of idempotent ticks (``loop.Daemon``).

Owns: the daemon; the names callers import from ``dethpc.control.daemon`` (re-exported
here).
Must not: be imported back by its own modules (they import each other by module path).
"""

from dethpc.control.daemon.loop import (
    OPEN_STATES,
    Daemon,
    LeaseLost,
    TickStats,
    Watched,
    backoff_s,
    fault_point,
    grown_files,
    next_delay,
    pull_failed,
    slurm_unreachable,
)

__all__ = ["OPEN_STATES", "Daemon", "LeaseLost", "TickStats", "Watched", "backoff_s",
           "fault_point", "grown_files", "next_delay", "pull_failed", "slurm_unreachable"]
