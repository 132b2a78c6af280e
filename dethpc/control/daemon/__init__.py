"""The daemon: a thin loop (``loop.Daemon``) over the named phases of a tick.

A tick, as ``Daemon.tick()`` reads:

1. ``recovery``: scancels an earlier tick could not make, and batches a crash left
   SUBMITTING (adopted by name, or failed so their trials are submitted again);
   ``dethpc.control.adoption`` adopts detached jobs that registered themselves.
2. ``pulls``: the pre-pull jobs trials wait on (the image gate).
3. ``poll``: every live job's state in one backend call, and the user's jobs.
4. ``reconciling``: each open experiment in its own transaction
   (``dethpc.control.reconcile``), then ``housekeeping`` removes the checkpoints it
   doomed.
5. ``cancel``: everything the experiments want cancelled, in one call.
6. ``submit``: per experiment, its arrays' ``throttles``, its trials that need a job
   (``batches``, within the ``budget`` of the user's job limits, once the image gate
   lets them) and its worker pool (``dethpc.control.worker_pool_tend``).

Between ticks, ``watch`` sleeps with back-off and runs the fast path for the metrics
files that grew. ``shared`` holds what the phases share (the tally, the owner's scope,
the lease guard, fault points), ``incidents`` what they record on an experiment,
``heap`` the collector settings of the process that runs the loop (``dethpc daemon
run`` settles them once, before its first tick).

Owns: the daemon and its phases; the names callers import from
``dethpc.control.daemon`` (re-exported here).
Must not: be imported back by its own modules (they import each other by module path),
hold state a killed daemon would miss, or call the backend per job.
"""

from dethpc.control.daemon.loop import Daemon
from dethpc.control.daemon.pulls import pull_failed
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
