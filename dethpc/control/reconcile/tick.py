"""One experiment's share of a daemon tick, inside one database transaction: the order.

Owns: ``ExperimentReconciler`` -- the parts of one experiment's tick built over the
same rows (``rows.TickRows``), run in their order: the searcher's first call; record
the polled job states (``job_ends``); ingest the trial files (``ingest``); judge and
carry out job ends (``job_ends``); refill after ``set-concurrency``; enact pause,
cancel and kill (``experiment_state``); cancel overdue stops (``stops``); end the
experiment; checkpoint GC (``checkpoints``); the searcher's snapshot, stored as the
text ``searcher_memo`` encodes once, only when the searcher was told something. ``run_fast`` is
the share between polls (ingest and searcher only). ``load_config`` reads the stored
config once per experiment per tick.
Must not: decide anything itself (the ``*_rules`` modules and ``job_end`` do), call a
backend or delete files. It returns the refs to cancel and the checkpoint directories
to delete; the daemon cancels in one call with every other experiment's refs and
deletes only after this transaction commits.

Idempotency: offsets, rows, unknown-tick counts and the searcher snapshot commit
together, so a daemon killed mid-tick re-reads the same lines and makes the same
decisions. Nothing is kept in memory between ticks but the searcher object the last
committed tick stored (``searcher_memo``), and it is used only while the store's
snapshot is, character for character, the text stored with it.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from dethpc.backends.base import JobInfo
from dethpc.config import parse_stored
from dethpc.config.model import ExperimentConfig
from dethpc.control.reconcile.checkpoints import collect_garbage, per_trial
from dethpc.control.reconcile.experiment_state import ExperimentStates
from dethpc.control.reconcile.ingest import Ingest
from dethpc.control.reconcile.job_ends import JobEnds
from dethpc.control.reconcile.rows import Outcome, TickRows
from dethpc.control.reconcile.searcher_memo import (
    Kept,
    SearcherMemo,
    load_state,
    read_snapshot,
    snapshot_text,
    write_snapshot,
)
from dethpc.control.reconcile.searcher_ops import SearcherOps
from dethpc.control.reconcile.skip_rules import LiveRow
from dethpc.control.reconcile.state_rules import search_starts, top_up_due
from dethpc.control.reconcile.stops import Stops
from dethpc.searchers import replay
from dethpc.searchers.base import Searcher
from dethpc.store.models import Experiment, ExperimentState, Job, SearcherState, Trial

#: the longest a daemon goes between two passes of the checkpoint policy over every
#: trial of an experiment (between them, over the trials that changed: ``_gc_scope``)
GC_FULL_EVERY_S = 300.0


def load_config(exp: Experiment) -> ExperimentConfig:
    return parse_stored(exp.config_yaml)


class ExperimentReconciler:
    """Reconciles one experiment; construct per tick, call ``run``."""

    def __init__(self, s: Session, exp: Experiment, infos: dict[str, JobInfo],
                 now: float, *, fast: bool = False, cfg: ExperimentConfig | None = None,
                 memo: SearcherMemo | None = None,
                 live_rows: list[LiveRow] | None = None,
                 state: tuple[SearcherState | None, str] | None = None) -> None:
        """``fast``: for ``run_fast`` between polls (``infos`` is empty then). ``cfg``: the
        experiment's config as the tick resolved it (``daemon.shared.Resolved``); None:
        read from ``exp``. ``memo``: the searchers earlier ticks left (``searcher_memo``);
        the caller keeps ``kept()`` in it once this transaction has committed. ``live_rows``:
        the experiment's live jobs as the tick's poll read them (None: read here).
        ``state``: its searcher state row and snapshot text as ``load_experiment`` read
        them with ``exp`` (None: read here, ``load_state``)."""
        self.s, self.exp, self.infos, self.now = s, exp, infos, now
        self.cfg = cfg if cfg is not None else load_config(exp)
        assert exp.id is not None
        # the row without its snapshot column, and that column as text (never decoded
        # here), in one statement
        ss, text = state if state is not None else load_state(s, exp.id)
        self.ss = ss if ss is not None else SearcherState(experiment_id=exp.id)
        got = read_snapshot(s, exp.id, exp.config_yaml, self.cfg, memo, text=text)
        self.searcher: Searcher = got.searcher
        #: max_concurrent_trials the last tick ran with (None: first tick, or older snapshot)
        self.last_concurrency: int | None = got.concurrency
        #: the searcher was restored from a stored snapshot
        self.restored = got.restored
        #: the snapshot text the store holds for ``searcher`` once this tick commits
        self.snapshot_text = got.text
        #: when the checkpoint policy last looked at every trial (``_gc_scope``)
        self.gc_full_at = got.gc_full_at
        self.rows = TickRows.load(s, exp, infos, now, fast=fast, live_rows=live_rows)
        self.stops = Stops(self.rows)
        self.ops = SearcherOps(self.rows, self.searcher, self.ss, self.stops)
        self.ingest = Ingest(self.rows, self.ops, self.cfg)
        self.job_ends = JobEnds(self.rows, self.ops, self.cfg)
        self.states = ExperimentStates(self.rows, self.ops)

    # ------------------------------------------------------------------ the order
    def run(self) -> Outcome:
        rows, state = self.rows, self.exp.state
        if search_starts(state, initialized=self.ss.initialized):
            self.ss.initialized = True
            self.ops.feed(replay.initial())
        for job in rows.jobs:
            self.job_ends.observe(job)
        trials = list(rows.trials.values())
        self.ingest.read_ahead([trial for trial in trials if self._to_read(trial)])
        for trial in trials:   # asked again: an earlier trial's lines may have changed it
            if self._to_read(trial):
                self.ingest.read(trial)
        for job in rows.jobs:   # a job woken meanwhile is judged too
            if job.live:
                self.job_ends.carry_out(job, self.job_ends.judge(job))
                self.job_ends.release_held(job)
        concurrency = self.cfg.searcher.max_concurrent_trials
        if top_up_due(state, last=self.last_concurrency, current=concurrency):
            self.ops.feed(replay.top_up())  # set-concurrency changed the limit
        self.states.enact()
        self.stops.stop_overdue(self.cfg.searcher.stop_grace_s)
        self.states.finish_if_done()
        return self._close(concurrency)

    def _to_read(self, trial: Trial) -> bool:
        """The trial's files are read this tick: it is open or its job lives, and it may
        have written something (``Ingest.unwritten``)."""
        return ((not trial.state.is_terminal or self.rows.live_job(trial) is not None)
                and not self.ingest.unwritten(trial))

    def run_fast(self, trial_ids: set[int]) -> Outcome:
        """The file-driven share of a tick (``Daemon.fast_tick``), between two polls of
        the backend: ingest the metrics of ``trial_ids`` (whose metrics.jsonl grew) and
        feed the searcher, so a rung's ``Stop`` writes the stop file at once. It judges
        no job (that needs the poll's states; ``run`` does it next tick) and cancels
        nothing on a timer (``stop_overdue`` stays with ``run``); without a poll, a stop
        writes the stop file even for a job still pending (``seen_pending``)."""
        if self.exp.state != ExperimentState.ACTIVE or not self.ss.initialized:
            return self.rows.out
        trials = [t for t in map(self.rows.trials.get, sorted(trial_ids)) if t is not None]
        self.ingest.read_ahead([t for t in trials if self.rows.live_job(t) is not None],
                               exits=False)
        for trial in trials:
            if self.rows.live_job(trial) is not None:
                self.ingest.read(trial, exits=False)
        return self._close(self.cfg.searcher.max_concurrent_trials)

    def _close(self, concurrency: int) -> Outcome:
        """The tick's metric rows, checkpoint GC, then the experiment's progress and the
        searcher's snapshot (with the limit it ran under) added to the transaction."""
        self.ingest.insert_metrics()
        self.rows.write_events()
        full = self.ingest.new_checkpoints or self.rows.out.changed
        only = self._gc_scope() if full else None
        collect_garbage(self.rows, self.cfg, full=full, only=only)
        if self.ops.calls or not self.restored or self.last_concurrency != concurrency:
            # a searcher told nothing this tick is as restored: its snapshot and progress
            # are what the store holds (rebuilding them was ~10 % of a tick at 10,000
            # trials, bench/tick_scale)
            self.exp.progress = self.searcher.progress()
            self.s.add(self.ss)
            self.s.flush()   # the row exists (a first tick adds it) before its snapshot
            self.snapshot_text = snapshot_text(self.searcher, concurrency)
            assert self.exp.id is not None
            write_snapshot(self.s, self.exp.id, self.snapshot_text)
            self.last_concurrency = concurrency
        self.s.add(self.exp)
        return self.rows.out

    def _gc_scope(self) -> set[int] | None:
        """The trials the checkpoint policy looks at this tick: those whose checkpoints,
        metrics or state changed (``rows.touched``) when the policy is per trial and a
        committed tick of this process passed over every trial less than
        ``GC_FULL_EVERY_S`` ago under the same snapshot (``searcher_memo``); else every
        trial (None), and that time is noted. A trial changed elsewhere (another process)
        is looked at again by the next full pass at the latest: a partial pass can only
        delete later, never what a full pass would keep. At 10,000 trials the pass over
        every completed checkpoint was ~60 ms of each tick that stored one."""
        if per_trial(self.cfg) and self.gc_full_at is not None \
                and self.now - self.gc_full_at < GC_FULL_EVERY_S:
            return self.rows.touched
        self.gc_full_at = self.now
        return None

    def kept(self) -> Kept:
        """The searcher as this tick leaves it, with the snapshot text stored for it: for
        the memo, once the transaction has committed."""
        return Kept(self.exp.config_yaml, self.snapshot_text, self.searcher,
                    self.last_concurrency, self.gc_full_at)

    # ------------------------------------------------------------------ for callers
    # What tests and tools reach for on a reconciler: the tick's rows and outcome, and
    # the searcher driver's entry points.
    @property
    def out(self) -> Outcome:
        return self.rows.out

    @property
    def quiet(self) -> dict[int, int]:
        return self.rows.quiet

    @property
    def trials(self) -> dict[int, Trial]:
        return self.rows.trials

    @property
    def jobs(self) -> list[Job]:
        return self.rows.jobs

    @jobs.setter
    def jobs(self, jobs: list[Job]) -> None:
        self.rows.jobs = jobs

    @property
    def live(self) -> dict[int, Job]:
        return self.rows.live

    def apply(self, actions: list[Any]) -> None:
        """Apply searcher actions (``SearcherOps.apply``)."""
        self.ops.apply(actions)

    def trial_of_request(self, request_id: int) -> Trial | None:
        return self.rows.trial_of_request(request_id)

    def finish_if_done(self) -> None:
        self.states.finish_if_done()
