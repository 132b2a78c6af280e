"""One experiment's share of a daemon tick, inside one database transaction.

Owns: the names the daemon, the surfaces and the tests import from
``dethpc.control.reconcile``, re-exported from the modules that own them. The package
is split by the decisions a tick makes, each with its pure rules apart from the code
that acts on rows (acting module, then its rules):

- ``tick`` (order of one tick: ``ExperimentReconciler``), ``state_rules``;
- ``rows`` (the rows a tick loads, quiet jobs left out), ``skip_rules``;
- ``ingest`` (metrics, checkpoints and exit records read in), ``ingest_rules``;
- ``job_ends`` (polled states, job ends), ``job_rules`` and ``dethpc.control.job_end``;
- ``searcher_ops`` (searcher calls and actions; every trial change settled), ``changes``;
- ``searcher_memo`` (the searcher kept between ticks, its snapshot stored as text);
- ``stops`` (stop, pause and cancel requests), ``stop_rules``;
- ``experiment_state`` (pause, activate, cancel, kill; the end), ``state_rules``;
- ``checkpoints`` (the checkpoints GC drops), ``dethpc.control.checkpoint_gc``.

Must not: hold logic itself (it only re-exports); no module of this package imports it.
"""

from dethpc.control.reconcile.ingest_rules import parse_exit_record
from dethpc.control.reconcile.job_rules import NOT_RESUBMITTED
from dethpc.control.reconcile.rows import TERMINAL_TRIAL_STATES, Outcome
from dethpc.control.reconcile.searcher_memo import CONCURRENCY_KEY, SearcherMemo
from dethpc.control.reconcile.skip_rules import (
    LiveRow,
    new_reasons,
    nothing_written_yet,
    quiet_job,
)
from dethpc.control.reconcile.tick import ExperimentReconciler, load_config

__all__ = [
    "CONCURRENCY_KEY",
    "NOT_RESUBMITTED",
    "TERMINAL_TRIAL_STATES",
    "ExperimentReconciler",
    "LiveRow",
    "Outcome",
    "SearcherMemo",
    "load_config",
    "new_reasons",
    "nothing_written_yet",
    "parse_exit_record",
    "quiet_job",
]
