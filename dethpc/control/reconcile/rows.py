"""The rows one experiment's tick works on, loaded once, and the moves every part makes on
them.

Owns: ``TickRows.load`` -- the live jobs and open trials of one experiment in a fixed
number of statements (quiet jobs left unloaded, their new pending reasons stored in one
UPDATE: ``skip_rules``; the trials, live or open without a job, in one SELECT; each
statement built once, with bound parameters) -- and the row moves the other parts
share: record an event, set a trial's state, close a job, find a trial's live job
(waking a quiet one), find the trial of a searcher request (an ended one read on
demand). The tick's events are kept as rows and written with one INSERT
(``write_events``, at the tick's close: an ORM object and its flush per event were
~0.1 ms each, 3 events a trial, bench/daemon_cost).
``Outcome`` is what the tick hands back to the daemon.
Must not: decide anything about a job's end, a stop or the searcher (the rule modules
do), read or write job files, or call a backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import and_, bindparam, or_
from sqlalchemy import select as sa_select
from sqlalchemy.orm import defer
from sqlmodel import Session, col, select

from dethpc.backends.base import JobInfo
from dethpc.common.kinds import EventKind
from dethpc.common.paths import ExperimentPaths, TrialPaths
from dethpc.control.reconcile.skip_rules import LiveRow, new_reasons, quiet_job
from dethpc.store.bulk import insert_rows
from dethpc.store.models import Event, Experiment, ExperimentState, Job, Trial, TrialState

T = TypeVar("T")

TERMINAL_TRIAL_STATES = [s for s in TrialState if s.is_terminal]
#: the tables the tick's column queries read (Core: no ORM row processing)
JOB = Job.__table__  # type: ignore[attr-defined]
TRIAL = Trial.__table__  # type: ignore[attr-defined]

# The tick's statements, built once with bound parameters (``exp``, ``ids``): building
# and keying a statement anew was ~0.1 ms each, a dozen a reconcile (bench/daemon_cost).
_j, _t = JOB.c, TRIAL.c
LIVE_ROWS = sa_select(
    _j.id, _j.trial_id, _j.ref, _j.state, _j.restart_count, _j.unknown_ticks, _j.reason,
    _j.nodes, _t.state, _t.steps_completed, _t.restarts, _t.runs, _t.stop_requested_at
).join_from(JOB, TRIAL, _t.id == _j.trial_id).where(
    _j.experiment_id == bindparam("exp"), _j.live == True)  # noqa: E712
#: the trials of ``ids``, by id, with the columns a tick uses (hparams and validate_at
#: only when a trial is promoted, its metadata only when replaced)
_TRIALS = select(Trial).options(defer(Trial.hparams),  # type: ignore[arg-type]
                                defer(Trial.validate_at),  # type: ignore[arg-type]
                                defer(Trial.meta)).order_by(col(Trial.id))  # type: ignore[arg-type]
TRIALS_BY_ID = _TRIALS.where(col(Trial.id).in_(bindparam("ids", expanding=True)))
#: the open trials of ``exp`` without a live job (few: queued trials have their pending
#: job), and the trials of ``ids``, in one statement
TRIALS_WANTED = _TRIALS.where(or_(
    col(Trial.id).in_(bindparam("ids", expanding=True)),
    and_(col(Trial.experiment_id) == bindparam("exp"),
         col(Trial.state).not_in(TERMINAL_TRIAL_STATES),
         col(Trial.id).not_in(sa_select(_j.trial_id).where(
             _j.experiment_id == bindparam("exp"), _j.live == True)))))  # noqa: E712
OPEN_WITHOUT_JOB = sa_select(_t.id).where(
    _t.experiment_id == bindparam("exp"), _t.state.not_in(TERMINAL_TRIAL_STATES),
    _t.id.not_in(sa_select(_j.trial_id).where(
        _j.experiment_id == bindparam("exp"), _j.live == True)))  # noqa: E712
JOBS_BY_ID = select(Job).where(col(Job.id).in_(bindparam("ids", expanding=True)))
REQUESTS = sa_select(_t.request_id).where(_t.experiment_id == bindparam("exp"))


@dataclass
class Outcome:
    cancel: list[str] = field(default_factory=list)
    #: jobs Slurm held mechanically (a failed launch, an expedited requeue's failed run),
    #: to release (``job_rules.release_held``)
    release: list[str] = field(default_factory=list)
    #: checkpoint directories GC marked DELETING: the daemon removes them after commit
    delete: dict[str, str] = field(default_factory=dict)
    changed: bool = False
    #: trial's ``searched`` marker -> the longest validation the searcher took this
    #: pass: the daemon writes them after commit (``dethpc.control.daemon.verdicts``)
    searched: dict[str, int] = field(default_factory=dict)


#: the most values one ``IN (...)`` takes here (SQLite before 3.32 allows 999 parameters)
IN_ONE = 900


def chunks(ids: list[T], size: int = IN_ONE) -> list[list[T]]:
    """``ids`` in pieces an ``IN (...)`` takes on every SQLite build."""
    return [ids[i:i + size] for i in range(0, len(ids), size)]


class TickRows:
    """The experiment's rows for one tick; build with ``load``."""

    def __init__(self, s: Session, exp: Experiment, infos: dict[str, JobInfo],
                 now: float) -> None:
        self.s, self.exp, self.infos, self.now = s, exp, infos, now
        assert exp.id is not None
        self.exp_id: int = exp.id
        self.paths = ExperimentPaths(Path(exp.run_dir))
        self.out = Outcome()
        #: trial id -> live job id of the *quiet* trials (``quiet_job``): neither row is
        #: loaded this tick unless something asks for it (``live_job``,
        #: ``trial_of_request``); building 14,000 ORM objects for 7,000 pending jobs and
        #: their trials was half of a tick at 10,000 trials
        self.quiet: dict[int, int] = {}
        #: the open trials and those with a live job (ended ones: ``trial_of_request``)
        self.trials: dict[int, Trial] = {}
        self.by_request: dict[int, Trial] = {}
        #: every trial's request id (the ended ones are not in ``trials``): read when
        #: first asked (``requests``), which a tick that creates or replays nothing never
        #: does (10,000 ids read every tick at 10,000 trials)
        self._requests: set[int] | None = None
        #: the live jobs of the loaded trials (a woken quiet one is appended)
        self.jobs: list[Job] = []
        #: the live job of each trial (at most one); kept in step by close_job
        self.live: dict[int, Job] = {}
        #: the jobs above by trial (an exit record looks its job up here: scanning
        #: every job per record made a tick that ingests many exits quadratic)
        self.jobs_of: dict[int, list[Job]] = {}
        #: trials whose checkpoints, their metrics or the trial's state changed this
        #: tick: what the checkpoint policy must look at again (``collect_garbage``)
        self.touched: set[int] = set()
        #: the tick's events not written yet, in their order (``write_events``)
        self.events: list[dict[str, Any]] = []

    @classmethod
    def load(cls, s: Session, exp: Experiment, infos: dict[str, JobInfo], now: float, *,
             fast: bool = False, live_rows: list[LiveRow] | None = None) -> TickRows:
        """The rows of ``exp`` this tick may change. ``fast``: between polls (``infos``
        is empty, the stored states decide which jobs are quiet). ``live_rows``: its live
        jobs' rows as the tick's poll read them (``daemon.poll.live_rows``: one read for
        every experiment and phase); None: read here."""
        rows = cls(s, exp, infos, now)
        if live_rows is None:
            live_rows = rows._live_rows()
        if exp.state == ExperimentState.ACTIVE:
            quiet_rows = [row for row in live_rows
                          if quiet_job(row, infos.get(row.ref or ""), fast=fast)]
            rows.quiet = {row.trial_id: row.job_id for row in quiet_rows}
            rows._store_reasons(new_reasons(quiet_rows, infos))
        rows._load_trials(live_rows)
        rows._load_jobs([row.job_id for row in live_rows if row.trial_id not in rows.quiet])
        return rows

    def _live_rows(self) -> list[LiveRow]:
        """The live jobs and their trials' columns, as a Core query over the tables (no
        ORM row processing: 7,000 rows at 10,000 trials)."""
        return list(map(LiveRow._make, self.s.execute(LIVE_ROWS, {"exp": self.exp_id}).all()))

    def _store_reasons(self, changed: list[dict[str, Any]]) -> None:
        """The quiet jobs' new pending reasons, in one statement (no row loaded)."""
        if changed:
            table = Job.__table__  # type: ignore[attr-defined]
            self.s.execute(table.update().where(table.c.id == bindparam("jid"))  # type: ignore[call-overload]
                           .values(reason=bindparam("r")), changed)

    def _load_trials(self, live_rows: list[LiveRow]) -> None:
        """The open trials and those with a live job, less the quiet ones: an ended
        trial is read only when asked for (``trial_of_request``); hparams and
        validate_at only when a trial is promoted, its metadata only when replaced
        (decoding every trial's JSON was a third of a tick at 10,000 trials)."""
        # the trials with a live job are the live rows' (less the quiet ones); the open
        # trials without one come with them, in one statement where the ids fit in one
        wanted = sorted({row.trial_id for row in live_rows if row.trial_id not in self.quiet})
        if len(wanted) <= IN_ONE:
            found = list(self.s.exec(TRIALS_WANTED, params={"ids": wanted, "exp": self.exp_id}))
        else:
            wanted = sorted(set(wanted).union(self.s.execute(
                OPEN_WITHOUT_JOB, {"exp": self.exp_id}).scalars()))
            found = [trial for chunk in chunks(wanted)
                     for trial in self.s.exec(TRIALS_BY_ID, params={"ids": chunk})]
        for trial in found:
            if trial.id is not None:
                self.trials[trial.id] = trial
        self.by_request = {trial.request_id: trial for trial in self.trials.values()}

    @property
    def requests(self) -> set[int]:
        """Every trial's request id, read once per tick when first asked."""
        if self._requests is None:
            # no autoflush first (a Core read flushes unless told not to): a tick changes
            # no request id and inserts its new trials at once (``searcher_ops._create``);
            # the tick's changes so far were flushed here, then again at the GC's read
            with self.s.no_autoflush:
                self._requests = set(self.s.execute(REQUESTS, {"exp": self.exp_id}).scalars())
        return self._requests

    def _load_jobs(self, loud: Sequence[int]) -> None:
        self.jobs = [j for chunk in chunks(list(loud))
                     for j in self.s.exec(JOBS_BY_ID, params={"ids": chunk})]
        self.live = {j.trial_id: j for j in self.jobs}
        for j in self.jobs:
            self.jobs_of.setdefault(j.trial_id, []).append(j)

    # ------------------------------------------------------------------ lookups
    def tpaths(self, trial: Trial) -> TrialPaths:
        assert trial.id is not None
        return self.paths.trial(trial.id)

    def is_open(self, trial_id: int) -> bool:
        """The trial has not ended (an ended one may not be loaded: ``trials``; a quiet
        one is open)."""
        trial = self.trials.get(trial_id)
        return trial_id in self.quiet or (trial is not None and not trial.state.is_terminal)

    def live_job(self, trial: Trial) -> Job | None:
        if trial.id is None:
            return None
        if trial.id in self.quiet:
            self.wake(trial.id)
        return self.live.get(trial.id)

    def wake(self, trial_id: int) -> None:
        """Load a quiet trial's job (and the trial, unless loaded): something acts on it
        this tick (a searcher stop, a replayed request)."""
        job = self.s.get(Job, self.quiet.pop(trial_id))
        if job is None or not job.live:
            return
        self.jobs.append(job)
        self.live[trial_id] = job
        self.jobs_of.setdefault(trial_id, []).append(job)
        if trial_id not in self.trials:
            trial = self.s.get(Trial, trial_id)
            if trial is not None:
                self.trials[trial_id] = trial
                self.by_request[trial.request_id] = trial

    def trial_of_request(self, request_id: int) -> Trial | None:
        """The trial of a searcher request, an ended one read from the store on demand."""
        trial = self.by_request.get(request_id)
        if trial is None and request_id in self.requests:
            trial = self.s.exec(select(Trial).where(Trial.experiment_id == self.exp_id,
                                                    Trial.request_id == request_id)).first()
            if trial is not None and trial.id is not None:
                self.trials[trial.id] = trial
                self.by_request[request_id] = trial
                if trial.id in self.quiet:
                    self.wake(trial.id)
        return trial

    # ------------------------------------------------------------------ moves
    def event(self, kind: EventKind, message: str, trial: Trial | None = None, *,
              data: dict[str, Any] | None = None) -> None:
        """Record an event in this tick's transaction (written by ``write_events``)."""
        self.events.append({"experiment_id": self.exp_id,
                            "trial_id": trial.id if trial else None, "kind": kind,
                            "message": message, "time": self.now, "data": data})
        self.out.changed = True

    def write_events(self) -> None:
        """The events recorded so far, in their order, with one INSERT (no row refers to
        an object still pending: a created trial is flushed for its id first)."""
        insert_rows(self.s, Event, self.events)
        self.events = []

    def close_job(self, job: Job) -> None:
        job.live = False
        if self.live.get(job.trial_id) is job:
            del self.live[job.trial_id]
        self.s.add(job)

    def set_state(self, trial: Trial, state: TrialState, reason: str = "") -> None:
        if trial.state == state:
            return
        trial.state = state
        if trial.id is not None:
            self.touched.add(trial.id)
        if reason:
            trial.exit_reason = reason
        if state.is_terminal or state in (TrialState.PAUSED, TrialState.WAITING):
            trial.ended_at = self.now
        self.s.add(trial)
        self.out.changed = True
