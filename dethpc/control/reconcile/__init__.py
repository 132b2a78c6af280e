"""One experiment's share of a daemon tick, inside one database transaction.

Owns: the names the daemon, the surfaces and the tests import from
``dethpc.control.reconcile``, re-exported from the modules that own them: ``tick``
(the reconciler) and the pure rules (``skip_rules``, ``ingest_rules``, ``job_rules``,
``stop_rules``, ``state_rules``, with ``changes`` their typed values).
Must not: hold logic itself (it only re-exports); no module of this package imports it.
"""

from dethpc.control.reconcile.ingest_rules import parse_exit_record
from dethpc.control.reconcile.job_rules import NOT_RESUBMITTED
from dethpc.control.reconcile.skip_rules import (
    LiveRow,
    new_reasons,
    nothing_written_yet,
    quiet_job,
)
from dethpc.control.reconcile.tick import (
    CONCURRENCY_KEY,
    TERMINAL_TRIAL_STATES,
    ExperimentReconciler,
    Outcome,
    load_config,
)

__all__ = [
    "CONCURRENCY_KEY",
    "NOT_RESUBMITTED",
    "TERMINAL_TRIAL_STATES",
    "ExperimentReconciler",
    "LiveRow",
    "Outcome",
    "load_config",
    "new_reasons",
    "nothing_written_yet",
    "parse_exit_record",
    "quiet_job",
]
