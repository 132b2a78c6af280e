"""One experiment's share of a daemon tick, inside one database transaction.

Owns: the names the daemon, the surfaces and the tests import from
``dethpc.control.reconcile``, re-exported from the modules that own them (``tick``).
Must not: hold logic itself (it only re-exports); no module of this package imports it.
"""

from dethpc.control.reconcile.tick import (
    CONCURRENCY_KEY,
    NOT_RESUBMITTED,
    TERMINAL_TRIAL_STATES,
    ExperimentReconciler,
    Outcome,
    load_config,
    new_reasons,
    nothing_written_yet,
    parse_exit_record,
    quiet_job,
)

__all__ = [
    "CONCURRENCY_KEY",
    "NOT_RESUBMITTED",
    "TERMINAL_TRIAL_STATES",
    "ExperimentReconciler",
    "Outcome",
    "load_config",
    "new_reasons",
    "nothing_written_yet",
    "parse_exit_record",
    "quiet_job",
]
