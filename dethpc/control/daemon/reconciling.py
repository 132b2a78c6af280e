"""The reconcile phase: each open experiment's share of the tick, in its own transaction.

Owns: ``Reconciling.run`` — per experiment, ``ExperimentReconciler(...).run()``
(``dethpc.control.reconcile``: record the poll, ingest the trial files, feed the
searcher, judge job ends, enact pause/cancel/kill, mark checkpoints for GC), then, once
that transaction has committed, the trials' ``searched`` markers (``verdicts``), the
searcher it stored kept for the next tick (``searcher_memo``: a hint checked against the
store) and the housekeeping of the checkpoints it doomed; the refs
every experiment wants cancelled are gathered for the cancel phase. An experiment whose
reconcile fails is failed (``incidents.fail_experiment``); the others go on.
``Reconciling.fast`` is the same between ticks for the metrics files that grew
(``run_fast``: no poll, no job judged), cancelling at once what a stop leaves pending.
Must not: call the backend except that between-ticks cancel, or decide anything about a
trial itself (the reconciler does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from dethpc.backends.base import JobInfo
from dethpc.common.errors import DethpcError
from dethpc.control.daemon.cancel import Canceller, wanted_refs
from dethpc.control.daemon.housekeeping import CheckpointDeleter
from dethpc.control.daemon.incidents import fail_experiment
from dethpc.control.daemon.shared import Guard, TickStats
from dethpc.control.daemon.verdicts import write_searched
from dethpc.control.reconcile import ExperimentReconciler, SearcherMemo
from dethpc.control.reconcile.searcher_memo import load_experiment
from dethpc.control.reconcile.skip_rules import LiveRow
from dethpc.control.resolved import Resolved
from dethpc.store import Store

log = logging.getLogger(__name__)


class Reconciling:
    def __init__(self, store: Store, clock: Callable[[], float], guard: Guard,
                 canceller: Canceller, checkpoints: CheckpointDeleter) -> None:
        self.store, self.clock, self.guard = store, clock, guard
        self.canceller, self.checkpoints = canceller, checkpoints
        #: the last run's jobs to release (held by Slurm after a failed launch or an
        #: expedited requeue's failed run)
        self.release: list[str] = []
        #: each experiment's searcher as the last committed transaction stored it: a
        #: hint, checked against the stored snapshot's text (``searcher_memo``)
        self.memo = SearcherMemo()

    def run(self, exp_ids: list[int], infos: dict[str, JobInfo], stats: TickStats,
            resolved: Mapping[int, Resolved] | None = None,
            live: Mapping[int, list[LiveRow]] | None = None) -> list[str]:
        """Reconcile each experiment; returns the refs they want cancelled (and keeps
        those to release in ``release``). ``resolved``: the tick's (config, pool) of each;
        ``live``: the live jobs' rows the poll read (``Observed.live``; None: each
        experiment reads its own)."""
        cancel: list[str] = []
        self.release = []
        self.memo.retain(exp_ids)
        for exp_id in exp_ids:
            try:
                with self.store.session() as s:
                    exp, ss, text = load_experiment(s, exp_id)
                    assert exp is not None
                    r = resolved.get(exp_id) if resolved is not None else None
                    rec = ExperimentReconciler(
                        s, exp, infos, self.clock(), memo=self.memo,
                        cfg=r.cfg if r is not None else None,
                        live_rows=live.get(exp_id, []) if live is not None else None,
                        state=(ss, text))
                    out = rec.run()
                self.memo.keep(exp_id, rec.kept())   # committed: the searcher stored
                write_searched(out.searched)
                cancel += out.cancel
                self.release += out.release
                stats.changed |= out.changed
                self.checkpoints.delete(out.delete)
            except DethpcError as exc:
                stats.errors.append(f"experiment {exp_id}: {exc}")
                fail_experiment(self.store, exp_id, str(exc))
        return cancel

    def fast(self, grown: dict[int, set[int]]) -> bool:
        """Ingest the metrics files that grew and feed the searcher, experiment by
        experiment (``ExperimentReconciler.run_fast``): a searcher ``Stop`` writes the
        trial's stop file now, not at the next tick. Returns whether anything changed.
        Errors are logged and left to the next tick, which does the same work."""
        self.guard.holds()
        cancel: list[str] = []
        changed = False
        for exp_id, trial_ids in sorted(grown.items()):
            try:
                with self.store.session() as s:
                    exp, ss, text = load_experiment(s, exp_id)
                    if exp is None:
                        continue
                    rec = ExperimentReconciler(s, exp, {}, self.clock(), fast=True,
                                               memo=self.memo, state=(ss, text))
                    out = rec.run_fast(trial_ids)
                self.memo.keep(exp_id, rec.kept())
                write_searched(out.searched)
                cancel += out.cancel
                changed |= out.changed
                self.checkpoints.delete(out.delete)
            except DethpcError as exc:
                log.error("experiment %s: between ticks: %s (the next tick retries)",
                          exp_id, exc)
        if cancel:
            self.guard.holds()
            try:
                self.canceller.cancel(wanted_refs(cancel))
            except DethpcError as exc:
                log.error("cancel between ticks failed: %s", exc)
        return changed
