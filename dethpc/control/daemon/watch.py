"""Between ticks: how long the daemon sleeps, and what it watches while it does.

Owns: the back-off (``next_delay``: ``tick_min_s`` after a busy tick, else the last
sleep doubled up to ``tick_max_s``; ``backoff_s``) and ``Watcher`` — the metrics files
of the trials whose job the last poll saw running (``refresh``, from the store's ingest
offsets), the wake file clients touch after changing an experiment
(``dethpc.control.service.wake``) and the worker pools' ``results/`` and ``leases/``
directories (a run ended; a worker took a run), with their marks taken when a tick
begins (``mark``). ``Watcher.wait`` sleeps until the next
tick, stats those files every ``metrics_poll_s`` and hands the grown metrics files to
the fast path it is given (``Daemon.fast_tick``) when a new line is one the searcher
acts on (``Acts``), unless the tick is due within one stat (the tick reads them then);
a wake, or a run that ended or
started in a pool, brings the next tick to ``tick_min_s`` after the last (which then
watches a started run's metrics file). ``grown_files`` and
``next_delay`` are the pure-ish rules (one stat per file, no backend call).
Must not: call the backend, or keep anything a restarted daemon would miss (it rebuilds
the watch from the store).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Text, bindparam, type_coerce
from sqlmodel import col, select
from sqlmodel.sql.expression import Select

from dethpc.backends.base import JobState
from dethpc.common.paths import METRICS_FILE, ExperimentPaths
from dethpc.common.worker_queue import WorkerPoolPaths
from dethpc.config.model import ClusterConfig
from dethpc.control.daemon.shared import Scope
from dethpc.control.reconcile.ingest_rules import LineKind, line_kind
from dethpc.control.run_dirs import RunDirs
from dethpc.store import Store
from dethpc.store.models import IngestOffset, Job, Trial

#: the fast path between ticks: experiment id -> its trials whose metrics file grew;
#: answers whether anything changed
FastTick = Callable[[dict[int, set[int]]], bool]


#: what makes a grown metrics file worth a fast pass: a record the searcher is told of
#: (a validation, an early exit). Anything else (training metrics, checkpoints,
#: metadata) waits for the next tick, which ingests every line: a checkpoint line after
#: each validation was a second fast pass, a whole reconcile transaction, for nothing
#: the searcher could act on (issue 47: ~1/3 of a pool search's fast passes)
FAST_MARKERS = (b'"validation"', b'"early_exit"')
VALIDATION, EARLY_EXIT = FAST_MARKERS
#: a growth larger than this is handed to the fast path unread
SCAN_MAX_BYTES = 1 << 20


@dataclass
class Acts:
    """The lengths at which a trial's validation can move its searcher, from the trial's
    row: its ``validate_at`` points and its ``target_length`` (searchers act on a
    validation only when it reaches one: ASHA's rungs, the independent searchers' end;
    ``dethpc.searchers``), less the target when reaching it ends the run (a worker pool's
    run: the run's result brings the tick, which ingests the line). ``seen``: the steps of
    the last validation ingested or seen. A validation between two points, or past the
    target of a pool run, waits for the tick: no decision could come of it (issue 47:
    bench/peers' pool search at 128 trials made 81-95 fast passes, 60-65 with this)."""

    target: int
    #: the trial's ``validate_at`` as stored (a JSON text, or the list a driver decoded):
    #: decoded when a validation first needs it
    validate_at: Any
    run_ends_at_target: bool
    seen: int = 0
    _points: tuple[int, ...] | None = field(default=None, repr=False, compare=False)

    def points(self) -> tuple[int, ...]:
        if self._points is None:
            raw = self.validate_at
            try:
                at = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
                pts = {int(v) for v in at or ()}
            except (TypeError, ValueError):
                pts = set()
            pts.add(self.target)
            self._points = tuple(sorted(pts))
        return self._points

    def worth_a_pass(self, steps: int) -> bool:
        """Whether a validation at ``steps`` reaches a point the searcher acts on that no
        earlier validation reached; ``seen`` moves to it."""
        seen, self.seen = self.seen, max(self.seen, steps)
        if self.run_ends_at_target and steps >= self.target:
            return False
        return any(seen < p <= steps for p in self.points())


@dataclass
class Watched:
    """A live trial's metrics.jsonl, watched between ticks (``Daemon.wait``): the size
    the daemon has ingested or seen, and (``scan``) where its scan for ``FAST_MARKERS``
    resumes: the start of the first line not yet seen whole (-1: at ``size``); ``acts``:
    which validations are worth a fast pass (None: every one). Memory only: a restarted
    daemon rebuilds it from the store's ingest offsets and trial rows."""

    exp_id: int
    path: Path
    size: int
    scan: int = field(default=-1, compare=False)
    acts: Acts | None = field(default=None, compare=False)


def grown_files(watch: dict[int, Watched]) -> dict[int, set[int]]:
    """Experiment id -> trials whose metrics file grew past its watched size with a
    whole line that the searcher is told of (``FAST_MARKERS``; one stat each, and a
    read of the new bytes; no backend call); the new sizes are remembered. A line still
    being written is scanned again, whole, when the file next grows."""
    out: dict[int, set[int]] = {}
    for trial_id, w in watch.items():
        try:
            size = os.stat(w.path).st_size
        except OSError:
            continue
        if size <= w.size:
            continue
        start = w.scan if 0 <= w.scan <= w.size else w.size
        w.size = size
        if _worth_a_pass(w, start, size):
            out.setdefault(w.exp_id, set()).add(trial_id)
    return out


def _worth_a_pass(w: Watched, start: int, size: int) -> bool:
    """Whether ``w``'s bytes from ``start`` to ``size`` hold a whole line with one of
    ``FAST_MARKERS``; moves ``w.scan`` past the whole lines read."""
    if size - start > SCAN_MAX_BYTES:
        w.scan = size
        return True
    try:
        with open(w.path, "rb") as fh:
            fh.seek(start)
            data = fh.read(size - start)
    except OSError:
        return True                  # the fast pass reads it, or says why not
    end = data.rfind(b"\n") + 1     # the whole lines; a partial one is read again
    w.scan = start + end
    whole = data[:end]
    if not any(m in whole for m in FAST_MARKERS):
        return False
    if w.acts is None or EARLY_EXIT in whole:
        return True
    worth = False
    for line in whole.splitlines():
        if VALIDATION not in line:
            continue
        steps = _validation_steps(line)
        if steps == _OTHER:
            continue
        # a line it cannot read is the fast pass's to judge (it says why not)
        worth = (steps is None or w.acts.worth_a_pass(steps)) or worth
    return worth


_OTHER = -1


def _validation_steps(line: bytes) -> int | None:
    """The steps of a validation record; None when ``line`` is not a record dethpc can
    read (not JSON, no integer steps); ``_OTHER`` when it is some other record (what a
    line is: ``ingest_rules.line_kind``, as the tick reads it)."""
    try:
        rec = json.loads(line)
        if not isinstance(rec, dict) or line_kind(rec) is not LineKind.VALIDATION:
            return _OTHER
        return max(0, int(rec.get("steps") or 0))
    except (TypeError, ValueError):
        return None


def next_delay(delay: float, busy: bool, tick_min_s: float, tick_max_s: float) -> float:
    """The daemon's sleep after a tick: ``tick_min_s`` after a busy one, else the last
    sleep doubled, up to ``tick_max_s``."""
    return tick_min_s if busy else min(delay * 2, tick_max_s)


def backoff_s(tick_min_s: float, tick_max_s: float) -> float:
    """How long an idle daemon sleeps before its sleeps reach ``tick_max_s`` (1 + 2 + 4 +
    8 s for the defaults): what a benchmark waits out for a backed-off daemon."""
    idle, delay = 0.0, tick_min_s
    while (delay := next_delay(delay, False, tick_min_s, tick_max_s)) < tick_max_s:
        idle += delay
    return idle


class Watcher:
    def __init__(self, store: Store, cluster: ClusterConfig, scope: Scope,
                 wake: Path | None) -> None:
        self.store, self.cluster, self.scope = store, cluster, scope
        #: the file clients touch after changing an experiment (``service.wake``) and its
        #: mtime when the last tick began: a change ends the wait between ticks; None:
        #: not watched (tests, ``dethpc daemon tick``)
        self.wake, self.wake_mark = wake, None if wake is None else _mtime(wake)
        #: live trials' metrics files, watched between ticks (``wait``): trial id -> file
        self.watch: dict[int, Watched] = {}
        #: the worker pools' ``results/`` and ``leases/`` directories of the experiments
        #: with live jobs (from ``refresh``) and their mtimes when the last tick began: a
        #: run that ends in a pool, or that a worker takes, changes one of them (a
        #: rename; heartbeats touch only the lease file), and the wait ends early
        self.pool_dirs: list[Path] = []
        self.pool_marks: dict[Path, int] = {}
        #: the run directory of each experiment with live jobs, read once
        self._run_dirs = RunDirs(store)
        # each tick's reads, built once (issue 47 item 2): the running jobs' trials, the
        # experiments with live jobs, and the ingested offsets of ``trials``
        # with what ``Acts`` needs of the trial (its validate_at undecoded: most
        # refreshes never read it)
        running: Select[*tuple[Any, ...]] = Select(
            col(Job.trial_id), col(Job.experiment_id), col(Trial.target_length),
            type_coerce(Trial.validate_at, Text), col(Trial.steps_completed)).join(
            Trial, col(Trial.id) == col(Job.trial_id)).where(
            col(Job.live) == True, col(Job.state) == JobState.RUNNING)  # noqa: E712
        self._running = scope.mine(running, Job.experiment_id)
        self._live_exps = scope.mine(select(Job.experiment_id).where(
            Job.live == True).distinct(), Job.experiment_id)  # noqa: E712
        self._offsets = select(IngestOffset.trial_id, IngestOffset.offset).where(
            IngestOffset.file == METRICS_FILE,
            col(IngestOffset.trial_id).in_(bindparam("trials", expanding=True)))

    def mark(self) -> None:
        """A tick begins, before anything is polled: a result written or a wake touched
        during this tick ends the next wait."""
        self.pool_marks = _mtimes(self.pool_dirs)
        if self.wake is not None:
            self.wake_mark = _mtime(self.wake)

    def wait(self, seconds: float, should_stop: Callable[[], bool],
             fast_tick: FastTick, *, refreshed: bool = False) -> bool:
        """Sleep until the next tick; meanwhile (``metrics_poll_s`` > 0) stat the live
        trials' metrics files that often and run ``fast_tick`` for those that grew, so
        a rung's validation reaches the searcher, and its stop the trial, within about
        ``metrics_poll_s`` instead of a tick's sleep. The fast path makes no backend
        call (except cancelling a still-pending job that a stop removes), so slurmctld
        RPCs stay per tick. It takes at most half the daemon's time: after a fast tick
        of T seconds the next stat waits T more. The same polls stat the wake file and
        the worker pools' ``results/``: either brings the next tick to ``tick_min_s``
        after the last. ``metrics_poll_s: 0`` turns all of this off: the daemon sleeps.
        Returns whether anything changed (the next tick then comes within
        ``tick_min_s``). A grown file seen when the tick is due within ``metrics_poll_s``
        gets no fast pass: the tick reads it, at most one stat later. ``refreshed``:
        ``refresh`` ran since the tick (``before_wait``)."""
        poll = self.cluster.metrics_poll_s
        if poll <= 0:
            _sleep(seconds, should_stop)
            return False
        if not refreshed:
            self.refresh()
        started = time.monotonic()
        end, changed, hurried = started + seconds, False, False
        while not should_stop():
            left = end - time.monotonic()
            if left <= 0:
                break
            _sleep(min(poll, left), should_stop)
            if not hurried and (self.woken() or self.pool_changed()):
                # a client changed an experiment, or a run ended in a worker pool (the
                # searcher hears of it at the next tick) or started (the next tick
                # watches its metrics): the next tick comes now, but never sooner than
                # tick_min_s after the last
                hurried = changed = True
                end = min(end, started + self.cluster.tick_min_s)
            grown = grown_files(self.watch)
            if not grown:
                continue
            if end - time.monotonic() <= poll:
                # the tick is due within one stat and ingests these lines itself: a
                # fast pass now was a second reconcile of the same lines a moment
                # before the tick's (issue 47: 68 of a pool search's 157 fast passes
                # came within 0.1 s of a tick). Not the tick brought forward: ticks
                # closer together cost more than the passes saved
                changed = True
                continue
            start = time.monotonic()
            if fast_tick(grown):
                changed = True
                end = min(end, time.monotonic() + self.cluster.tick_min_s)
            spent = time.monotonic() - start
            _sleep(min(spent, max(0.0, end - time.monotonic())), should_stop)
        return changed

    def before_wait(self) -> bool:
        """``refresh`` when the wait will stat files (``metrics_poll_s`` > 0); whether it
        ran. Called at a tick's end, its read is one of the tick's (``Store.tick``)."""
        if self.cluster.metrics_poll_s <= 0:
            return False
        self.refresh()
        return True

    def refresh(self) -> None:
        """Watch the metrics file of every trial whose job the last poll saw running
        (pending jobs write nothing: at 10,000 queued trials the stats stay as many as
        the jobs running), from the offset the store has ingested (so a record written
        during the tick is seen at once). A job that started since is watched from the
        tick that sees it running; until then its records wait for the tick. The worker
        pools of the experiments with live jobs are watched whether their runs started
        or not: a worker taking one brings that tick forward."""
        with self.store.read() as s:   # columns, not Job or IngestOffset objects
            running = {row[0]: row for row in s.exec(self._running)}
            live_exps = set(s.exec(self._live_exps))
            if not live_exps:
                self.watch, self.pool_dirs = {}, []
                return
            offsets = {trial_id: offset for trial_id, offset in s.exec(
                self._offsets, params={"trials": list(running)})}
        run_dirs = self._run_dirs.of(live_exps)
        pools = {exp_id: WorkerPoolPaths.of_run_dir(Path(d)) for exp_id, d in run_dirs.items()}
        self.pool_dirs = [d for p in pools.values() for d in (p.results, p.leases) if d.is_dir()]
        # a worker pool's run ends at its target (one searcher operation a run): the
        # experiments whose results/ the line above found
        watched = set(self.pool_dirs)
        in_pool = {exp_id for exp_id, p in pools.items() if p.results in watched}
        self.watch = {
            trial_id: Watched(exp_id, ExperimentPaths(Path(run_dirs[exp_id]))
                              .trial(trial_id).metrics, offsets.get(trial_id, 0),
                              acts=_acts(target, validate_at, exp_id in in_pool, steps))
            for trial_id, exp_id, target, validate_at, steps in running.values()
            if exp_id in run_dirs}
        for r, mtime in _mtimes(r for r in self.pool_dirs
                                if r not in self.pool_marks).items():
            self.pool_marks[r] = mtime       # a pool first seen now: from now on

    def woken(self) -> bool:
        """Whether a client touched the wake file since the last tick began (one stat)."""
        return self.wake is not None and _mtime(self.wake) != self.wake_mark

    def pool_changed(self) -> bool:
        """Whether a watched pool's ``results/`` or ``leases/`` changed since the last
        tick began (a worker wrote a run's result, or took a run: one stat per
        directory, no backend call)."""
        now = _mtimes(self.pool_dirs)
        return any(self.pool_marks.get(r) != m for r, m in now.items())


def _acts(target: int, validate_at: Any, in_pool: bool, steps: int) -> Acts | None:
    """A running trial's ``Acts``; None (every validation is worth a pass) without a
    target. ``seen`` starts below the steps it has completed: a training line at a rung's
    steps may have been ingested before that rung's validation was written."""
    if target <= 0:
        return None
    return Acts(target, validate_at, in_pool, seen=steps - 1)


def _mtime(path: Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _mtimes(paths: Iterable[Path]) -> dict[Path, int]:
    """The mtime of each of ``paths`` that exists."""
    return {p: m for p in paths if (m := _mtime(p)) is not None}


def _sleep(seconds: float, should_stop: Callable[[], bool]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not should_stop():
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))
