"""What the daemon's phases cost the store, counted (issue 47 item 2; timings are
bench/daemon_cost's and bench/tick_scale's).

- The hang watchdog reads the two columns it needs of the live jobs, not Job objects:
  at 10,000 trials it built 7,000 of them per tick to watch the 64 running.
- A reconcile that tells the searcher nothing leaves its stored snapshot and the
  experiment's progress as they are (no ``snapshot()``, no ``progress()``); one that
  tells it something, or runs under a new concurrency limit, stores them as before.
"""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import event

from dethpc.backends.base import JobInfo, JobState
from dethpc.control.daemon.shared import TickStats
from dethpc.control.daemon.watchdog import Watchdog
from dethpc.searchers.random_search import RandomSearcher
from dethpc.store import Store
from dethpc.store.models import Job, SearcherState
from tests.unit.control.daemon_kit import world
from tests.unit.control.test_tick_scale import experiment, infos_for, tick, write_steps


def test_the_watchdog_builds_no_job_objects_and_watches_the_running(tmp_path: Path) -> None:
    w = world(tmp_path)
    trials = w.add_trials(40)
    w.add_batch(trials, ref="700_{i}", live=True)
    infos = {f"700_{i}": JobInfo(f"700_{i}", JobState.RUNNING if i < 3 else JobState.PENDING)
             for i in range(40)}
    built: list[object] = []

    def on_load(target: object, _ctx: object) -> None:
        built.append(target)

    event.listen(Job, "load", on_load)
    try:
        dog = Watchdog(w.store, w.cluster, w.backend, clock=lambda: 1000.0)
        assert dog.run([w.exp_id], infos, TickStats()) == []
    finally:
        event.remove(Job, "load", on_load)
    assert built == []
    assert sorted(dog._watch) == ["700_0", "700_1", "700_2"]


def test_a_tick_that_tells_the_searcher_nothing_rebuilds_no_snapshot(tmp_path: Path,
                                                                     monkeypatch) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id, refs = experiment(store, tmp_path, 6)
    with store.session() as s:
        before = s.get(SearcherState, exp_id)
        assert before is not None and before.snapshot
        stored = dict(before.snapshot)
    built: list[str] = []
    real_text, real_progress = RandomSearcher.snapshot_text, RandomSearcher.progress

    def snapshot_text(self, extra):  # type: ignore[no-untyped-def]
        built.append("snapshot")
        return real_text(self, extra)

    def progress(self):  # type: ignore[no-untyped-def]
        built.append("progress")
        return real_progress(self)

    monkeypatch.setattr(RandomSearcher, "snapshot_text", snapshot_text)
    monkeypatch.setattr(RandomSearcher, "progress", progress)
    running = set(sorted(refs)[:2])
    tick(store, exp_id, infos_for(refs, running))          # jobs start: no searcher call
    write_steps(store, exp_id, min(running), 1, 2)         # training lines only
    tick(store, exp_id, infos_for(refs, running))
    assert built == []
    with store.session() as s:
        after = s.get(SearcherState, exp_id)
        assert after is not None and after.snapshot == stored
    with open(tmp_path / "run-6" / "trials" / str(min(running)) / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"kind": "validation", "steps": 2,       # the searcher hears it
                            "metrics": {"loss": 0.5}}) + "\n")
    tick(store, exp_id, infos_for(refs, running))
    assert built == ["progress", "snapshot"]


def test_the_watchdog_asks_the_store_for_the_running_jobs_rows_alone(tmp_path: Path) -> None:
    """The jobs this poll saw running name the rows read: at 50,000 trials the live rows
    were 35,000 a tick for 64 running."""
    w = world(tmp_path)
    trials = w.add_trials(40)
    w.add_batch(trials, ref="700_{i}", live=True)
    infos = {f"700_{i}": JobInfo(f"700_{i}", JobState.RUNNING if i < 3 else JobState.PENDING)
             for i in range(40)}
    asked: list[object] = []

    def on_execute(_conn, _cursor, statement, params, _ctx, _many):  # type: ignore[no-untyped-def]
        if "FROM job" in statement:
            asked.append(params)

    engine = w.store.engine
    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        dog = Watchdog(w.store, w.cluster, w.backend, clock=lambda: 1000.0)
        dog.run([w.exp_id], infos, TickStats())
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
    refs = {p for params in asked for p in params if isinstance(p, str) and "_" in p}
    assert refs == {"700_0", "700_1", "700_2"}
    assert sorted(dog._watch) == ["700_0", "700_1", "700_2"]


def test_the_watchdog_reads_nothing_when_only_pool_workers_run(tmp_path: Path) -> None:
    """A pool search's poll sees its workers running and its items (no trial's job):
    the watchdog asks the store nothing (it read the experiment's row and the jobs named
    by the workers' refs every tick, finding none: a worker array has no Job rows), and
    forgets what it watched; a trial's job running beside them is still watched."""
    w = world(tmp_path)
    trials = w.add_trials(4)
    w.add_batch(trials[:1], ref="700_{i}", live=True)
    workers = {"900_0", "900_1"}
    infos = {r: JobInfo(r, JobState.RUNNING) for r in workers}
    infos["pool:1:t2-s0"] = JobInfo("pool:1:t2-s0", JobState.RUNNING)
    statements: list[str] = []

    def on_execute(_conn, _cursor, statement, _params, _ctx, _many):  # type: ignore[no-untyped-def]
        statements.append(statement)

    dog = Watchdog(w.store, w.cluster, w.backend, clock=lambda: 1000.0,
                   workers=lambda: workers)
    dog.run([w.exp_id], {**infos, "700_0": JobInfo("700_0", JobState.RUNNING)}, TickStats())
    assert sorted(dog._watch) == ["700_0"]
    engine = w.store.engine
    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        assert dog.run([w.exp_id], infos, TickStats()) == []
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
    assert statements == []
    assert dog._watch == {}


class Statements:
    """The SQL statements run on ``engine`` inside the ``with`` block."""

    def __init__(self, engine: object) -> None:
        self.engine, self.run = engine, []

    def _on(self, _conn, _cursor, statement, _params, _ctx, _many):  # type: ignore[no-untyped-def]
        self.run.append(statement)

    def __enter__(self) -> list[str]:
        event.listen(self.engine, "before_cursor_execute", self._on)
        return self.run

    def __exit__(self, *_exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._on)


def test_the_experiments_run_directory_is_read_once_by_the_watch_and_the_pool(
        tmp_path: Path) -> None:
    """An experiment's run directory never changes once it is set: the watch between ticks
    and the pool's item poll read it from its row once, not every tick (issue 47 item 2)."""
    from dethpc.backends.base import JobState as JS
    from dethpc.control.daemon.shared import Scope
    from dethpc.control.daemon.watch import Watcher
    from dethpc.store.models import BatchState
    from tests.unit.control.test_daemon_submit import Parts

    w = world(tmp_path)
    trials = w.add_trials(2, needs_job=False)
    w.add_batch(trials, batch_state=BatchState.SUBMITTED, ref="5_{i}", state=JS.RUNNING)
    watcher = Watcher(w.store, w.cluster, Scope(), None)
    tender = Parts(w).worker_pools
    with Statements(w.store.engine) as first:
        watcher.refresh()
        first_paths = tender.pool_paths([w.exp_id])
    with Statements(w.store.engine) as again:
        watcher.refresh()
        assert tender.pool_paths([w.exp_id]) == first_paths
    assert sum("FROM experiment" in q for q in first) == 2
    assert not any("FROM experiment" in q for q in again), again
    assert sorted(watcher.watch) == sorted(t.id for t in trials)


def test_a_tick_with_no_trial_to_submit_reads_no_experiment_row(tmp_path: Path) -> None:
    """The submit phase asks for the trials that need a job first: most ticks there are
    none, and the experiment's row is not read (issue 47 item 2)."""
    from tests.unit.control.test_daemon_submit import Parts

    w = world(tmp_path)
    w.add_trials(2, needs_job=False)
    parts = Parts(w)
    with Statements(w.store.engine) as run:
        assert parts.submitter.experiment(w.exp_id) == 0
    assert len(run) == 1 and "FROM trial" in run[0], run
