"""A tick's cost at thousands of trials (issue 16 item 5), against a real SQLite store.

- The database statements of one experiment's reconcile do not grow with its trials:
  ingest offsets of the open trials come in one query (before: one lookup per trial
  and file, most of a tick at 3,000 trials), and a trial whose job this poll saw
  pending, never requeued, with nothing ingested yet, is not read at all.
- Ended trials without a live job are not loaded (a long experiment is mostly ended
  trials); a searcher request naming one still finds it, and a replayed ``Create``
  of its request makes no second trial.
- That skip loses nothing: lines written once the job runs are read from the start on
  the next tick; a requeued job that is pending again is still read (its first run
  wrote), and so is a trial something was ingested of before.
"""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import product
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlmodel import select

from dethpc.backends.base import JobInfo, JobState
from dethpc.common.exitcodes import ExitReason
from dethpc.common.paths import ExperimentPaths
from dethpc.control.job_end import ExitRecord, JobFacts, Kind, TrialFacts, judge, nothing_to_judge
from dethpc.control.reconcile import ExperimentReconciler, nothing_written_yet
from dethpc.searchers.base import Create, Stop
from dethpc.store import Store
from dethpc.store.models import (
    Batch,
    BatchState,
    Experiment,
    IngestOffset,
    Job,
    Metric,
    SearcherState,
    Trial,
    TrialState,
)


def config(n: int) -> str:
    return (f"name: t\nentrypoint: python3 train.py\nhyperparameters: {{x: 1.0}}\n"
            f"searcher: {{name: random, metric: loss, max_trials: {n}, "
            f"max_concurrent_trials: {n}, max_length: {{batches: 100}}}}\n")


def tick(store: Store, exp_id: int, infos: dict[str, JobInfo]) -> None:
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        ExperimentReconciler(s, exp, infos, 1000.0).run()


def experiment(store: Store, tmp_path: Path, n: int) -> tuple[int, dict[int, str]]:
    """``n`` random-search trials, each with a live (pending) job ``7_<i>``; returns the
    experiment id and each trial's ref."""
    run_dir = tmp_path / f"run-{n}"
    run_dir.mkdir()
    with store.session() as s:
        exp = Experiment(name="t", config_yaml=config(n), run_dir=str(run_dir))
        s.add(exp)
        s.flush()
        assert exp.id is not None
        s.add(SearcherState(experiment_id=exp.id))
        exp_id = exp.id
    tick(store, exp_id, {})   # the searcher creates the trials
    refs: dict[int, str] = {}
    with store.session() as s:
        batch = Batch(experiment_id=exp_id, state=BatchState.SUBMITTED, array_job_id="7")
        s.add(batch)
        s.flush()
        assert batch.id is not None
        trials = list(s.exec(select(Trial).where(Trial.experiment_id == exp_id)))
        assert len(trials) == n
        for i, trial in enumerate(sorted(trials, key=lambda t: t.id or 0)):
            assert trial.id is not None
            refs[trial.id] = f"7_{i}"
            s.add(Job(experiment_id=exp_id, trial_id=trial.id, batch_id=batch.id,
                      ref=refs[trial.id], array_index=i, state=JobState.PENDING))
            trial.needs_job = False
            s.add(trial)
    return exp_id, refs


def write_steps(store: Store, exp_id: int, trial_id: int, first: int, last: int) -> None:
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        tp = ExperimentPaths(Path(exp.run_dir)).trial(trial_id).ensure()
    with open(tp.metrics, "a") as f:
        for step in range(first, last + 1):
            f.write(json.dumps({"kind": "training", "steps": step,
                                "metrics": {"loss": 1.0 / step}}) + "\n")


def infos_for(refs: dict[int, str], running: set[int],
              restarts: dict[int, int] | None = None) -> dict[str, JobInfo]:
    return {ref: JobInfo(ref=ref, state=JobState.RUNNING if tid in running
                         else JobState.PENDING,
                         restart_count=(restarts or {}).get(tid, 0))
            for tid, ref in refs.items()}


def statements_of_a_steady_tick(store: Store, tmp_path: Path, n: int) -> int:
    return len(steady_tick_statements(store, tmp_path, n))


def steady_tick_statements(store: Store, tmp_path: Path, n: int) -> list[str]:
    """The SQL of one steady tick (3 of ``n`` trials running, two lines each)."""
    exp_id, refs = experiment(store, tmp_path, n)
    running = set(sorted(refs)[:3])
    for tid in running:
        write_steps(store, exp_id, tid, 1, 2)
    tick(store, exp_id, infos_for(refs, running))   # jobs start; first lines ingested
    for tid in running:
        write_steps(store, exp_id, tid, 3, 4)
    seen: list[str] = []

    def counter(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", counter)
    try:
        tick(store, exp_id, infos_for(refs, running))
    finally:
        event.remove(store.engine, "before_cursor_execute", counter)
    with store.session() as s:
        got = s.exec(select(Metric).where(Metric.trial_id.in_(running))).all()  # type: ignore[attr-defined]
    assert len(got) == 3 * 4   # every line of every running trial, once
    return seen


def test_statements_per_tick_do_not_grow_with_the_trials(tmp_path: Path) -> None:
    small = statements_of_a_steady_tick(Store(f"sqlite:///{tmp_path / 'a.sqlite'}"),
                                        tmp_path, 20)
    large = statements_of_a_steady_tick(Store(f"sqlite:///{tmp_path / 'b.sqlite'}"),
                                        tmp_path, 200)
    assert large == small, (small, large)


def test_a_steady_tick_reads_each_table_once(tmp_path: Path) -> None:
    """The trials (live and open without a job) come in one SELECT, the searcher state row
    with its snapshot text in one, the offsets in one, the GC's rows in one (a fixed cost
    of each of the ~100 reconciles of a 128-trial run: bench/daemon_cost/reconcile_fixed.py)."""
    got = steady_tick_statements(Store(f"sqlite:///{tmp_path / 'a.sqlite'}"), tmp_path, 20)
    selects = [" ".join(q.split()) for q in got if q.lstrip().upper().startswith("SELECT")]
    first_from = [q.split(" FROM ", 1)[1].split()[0] for q in selects]
    for table in ("trial", "searcherstate", "ingestoffset", "checkpoint"):
        assert first_from.count(table) == 1, (table, selects)


def test_jobs_that_ended_are_written_once_a_tick(tmp_path: Path) -> None:
    """Reading the offsets does not flush the polled states first (the rows are written
    with the rest of the tick's changes: one UPDATE of the jobs, not one for their polled
    states and another for their ends)."""
    store = Store(f"sqlite:///{tmp_path / 'a.sqlite'}")
    exp_id, refs = experiment(store, tmp_path, 6)
    running = set(sorted(refs)[:3])
    for tid in running:
        write_steps(store, exp_id, tid, 1, 2)
    tick(store, exp_id, infos_for(refs, running))
    infos = infos_for(refs, running)
    for tid in sorted(running)[:2]:
        infos[refs[tid]] = JobInfo(ref=refs[tid], state=JobState.COMPLETED, exit_code=0)
    seen: list[str] = []

    def counter(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(store.engine, "before_cursor_execute", counter)
    try:
        tick(store, exp_id, infos)
    finally:
        event.remove(store.engine, "before_cursor_execute", counter)
    assert sum(q.startswith("UPDATE job ") for q in seen) == 1, seen
    with store.session() as s:
        ended = s.exec(select(Job).where(Job.experiment_id == exp_id,
                                         Job.state == JobState.COMPLETED)).all()
    assert len(ended) == 2 and not any(j.live for j in ended)


@pytest.mark.parametrize(("state", "restarts", "ingested", "skip"), [
    (JobState.PENDING, 0, False, True),
    (JobState.PENDING, 1, False, False),    # requeued: its first run wrote
    (JobState.PENDING, 0, True, False),     # an earlier job of the trial wrote
    (JobState.RUNNING, 0, False, False),
    (JobState.COMPLETED, 0, False, False),  # ran between two polls
    (JobState.UNKNOWN, 0, False, False),
])
def test_only_a_never_started_job_is_not_read(state: JobState, restarts: int,
                                              ingested: bool, skip: bool) -> None:
    assert nothing_written_yet(state, restarts, ingested=ingested) is skip


def test_a_pending_job_that_starts_later_is_read_from_the_start(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id, refs = experiment(store, tmp_path, 3)
    first, second, third = sorted(refs)
    # lines land after the poll that still saw the job pending: left for the next tick
    write_steps(store, exp_id, first, 1, 3)
    tick(store, exp_id, infos_for(refs, set()))
    with store.session() as s:
        assert s.exec(select(Metric)).all() == []
        assert s.get(IngestOffset, (first, "metrics.jsonl")) is None
    tick(store, exp_id, infos_for(refs, {first}))
    with store.session() as s:
        assert [m.steps for m in s.exec(select(Metric).where(Metric.trial_id == first))] \
            == [1, 2, 3]
        assert s.get(IngestOffset, (first, "metrics.jsonl")) is not None
    # a job Slurm requeued (pending again, restart count 1) is still read
    write_steps(store, exp_id, second, 1, 2)
    tick(store, exp_id, infos_for(refs, set(), restarts={second: 1}))
    # and so is a trial something was ingested of before, pending again
    write_steps(store, exp_id, first, 4, 4)
    tick(store, exp_id, infos_for(refs, set(), restarts={second: 1}))
    with store.session() as s:
        steps = {tid: sorted(m.steps for m in s.exec(select(Metric).where(
            Metric.trial_id == tid))) for tid in (first, second, third)}
    assert steps == {first: [1, 2, 3, 4], second: [1, 2], third: []}


def end_trials(store: Store, exp_id: int, trial_ids: list[int]) -> None:
    """``trial_ids`` completed, their jobs closed (as a tick leaves them)."""
    with store.session() as s:
        for tid in trial_ids:
            trial = s.get(Trial, tid)
            assert trial is not None
            trial.state = TrialState.COMPLETED
            s.add(trial)
            for job in s.exec(select(Job).where(Job.trial_id == tid)):
                job.live, job.state = False, JobState.COMPLETED
                s.add(job)


def test_ended_trials_are_not_loaded_by_a_tick(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id, refs = experiment(store, tmp_path, 20)
    ended = sorted(refs)[:15]
    end_trials(store, exp_id, ended)
    loaded: list[int] = []

    def on_load(target: Trial, _context: object) -> None:
        loaded.append(target.id or 0)

    running = set(sorted(set(refs) - set(ended))[:2])
    event.listen(Trial, "load", on_load)
    try:
        tick(store, exp_id, infos_for({t: r for t, r in refs.items() if t not in ended},
                                      running))
    finally:
        event.remove(Trial, "load", on_load)
    # ended: not loaded; the 3 open trials whose jobs this poll saw pending as they were
    # submitted (quiet) neither; the 2 running ones are
    assert sorted(loaded) == sorted(running)


QUIET_ROWS = [
    # (job state, restart count, unknown ticks, trial state, steps, restarts, runs, stop
    #  asked, poll's state, poll's restart count, poll's reason) -> quiet
    ((JobState.PENDING, 0, 0, TrialState.QUEUED, 0, 0, 0, None, JobState.PENDING, 0, ""), True),
    ((JobState.PENDING, 0, 0, TrialState.QUEUED, 0, 0, 0, None, JobState.RUNNING, 0, ""), False),
    ((JobState.PENDING, 0, 0, TrialState.QUEUED, 0, 0, 0, None, JobState.PENDING, 1, ""), False),
    ((JobState.PENDING, 0, 0, TrialState.QUEUED, 0, 0, 0, None, JobState.PENDING, 0,
      "Priority"), True),              # a new pending reason: stored without loading rows
    ((JobState.PENDING, 0, 0, TrialState.QUEUED, 0, 0, 0, None, JobState.UNKNOWN, 0, ""), False),
    ((JobState.PENDING, 0, 0, TrialState.QUEUED, 0, 0, 0, None, JobState.FAILED, 0, ""), False),
    ((JobState.PENDING, 1, 0, TrialState.QUEUED, 0, 0, 0, None, JobState.PENDING, 1, ""), False),
    ((JobState.PENDING, 0, 2, TrialState.QUEUED, 0, 0, 0, None, JobState.PENDING, 0, ""), False),
    ((JobState.PENDING, 0, 0, TrialState.QUEUED, 5, 0, 0, None, JobState.PENDING, 0, ""), False),
    ((JobState.PENDING, 0, 0, TrialState.QUEUED, 0, 1, 1, None, JobState.PENDING, 0, ""), False),
    ((JobState.PENDING, 0, 0, TrialState.QUEUED, 0, 0, 0, 5.0, JobState.PENDING, 0, ""), False),
    ((JobState.RUNNING, 0, 0, TrialState.RUNNING, 0, 0, 0, None, JobState.PENDING, 0, ""), False),
    ((JobState.PENDING, 0, 0, TrialState.PAUSED, 0, 0, 0, None, JobState.PENDING, 0, ""), False),
]


@pytest.mark.parametrize("facts,quiet", QUIET_ROWS)
def test_quiet_job_only_when_the_tick_cannot_change_it(facts, quiet) -> None:
    from dethpc.control.reconcile import quiet_job

    (state, rc, unknown, tstate, steps, restarts, runs, stop, pstate, prc, reason) = facts
    row = (1, 2, "7_0", state, rc, unknown, "", "", tstate, steps, restarts, runs, stop)
    info = JobInfo(ref="7_0", state=pstate, restart_count=prc, reason=reason)
    assert quiet_job(row, info) is quiet
    assert quiet_job(row, None) is False               # a tick that could not tell
    # between polls the stored state decides
    assert quiet_job(row, None, fast=True) is (state == JobState.PENDING and rc == 0
                                                and unknown == 0
                                                and tstate == TrialState.QUEUED
                                                and steps == restarts == runs == 0
                                                and stop is None)


def test_a_new_pending_reason_is_stored_without_loading_the_quiet_rows(
        tmp_path: Path) -> None:
    """Slurm re-labels pending jobs as it schedules (None -> Priority -> Resources): the
    reason ``describe`` shows is stored, and the jobs stay quiet (no row loaded)."""
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id, refs = experiment(store, tmp_path, 5)
    infos = infos_for(refs, set())
    relabelled = sorted(refs)[:3]
    for tid in relabelled:
        infos[refs[tid]] = replace(infos[refs[tid]], reason="Resources")
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        rec = ExperimentReconciler(s, exp, infos, 1000.0)
        assert set(rec.quiet) == set(refs) and not rec.trials and not rec.jobs
    with store.session() as s:
        reasons = {j.trial_id: j.reason for j in s.exec(select(Job)).all()}
    assert reasons == {tid: "Resources" if tid in relabelled else "" for tid in refs}


def test_a_searcher_stop_of_a_quiet_trial_loads_and_cancels_its_job(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id, refs = experiment(store, tmp_path, 6)
    infos = infos_for(refs, set())
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        rec = ExperimentReconciler(s, exp, infos, 1000.0)
        assert set(rec.quiet) == set(refs) and not rec.trials and not rec.jobs
        victim = sorted(refs)[2]
        trial = s.get(Trial, victim)
        assert trial is not None
        rec.apply([Stop(request_id=trial.request_id)])
        assert rec.out.cancel == [refs[victim]]          # still pending: cancelled
        assert victim not in rec.quiet
        rec.finish_if_done()                             # the quiet ones are still open
        assert exp.state == "ACTIVE"
    with store.session() as s:
        t = s.get(Trial, victim)
        assert t is not None and t.state == TrialState.STOPPED
        job = s.exec(select(Job).where(Job.trial_id == victim)).one()
        assert job.live is False


def test_searcher_requests_for_ended_trials_still_find_them(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id, refs = experiment(store, tmp_path, 4)
    ended = sorted(refs)[:2]
    end_trials(store, exp_id, ended)
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        rec = ExperimentReconciler(s, exp, {}, 1000.0)
        assert set(rec.trials) == set(refs) - set(ended)
        first = s.get(Trial, ended[0])
        assert first is not None
        rid = first.request_id
        # a replayed Create of an ended trial's request makes no second trial
        rec.apply([Create(request_id=rid, hparams={"x": 1.0}, length=100),
                   Stop(request_id=rid)])
        assert rec.trial_of_request(rid) is not None
    with store.session() as s:
        rows = s.exec(select(Trial).where(Trial.experiment_id == exp_id)).all()
        assert len(rows) == 4
        assert {t.state for t in rows if t.id in ended} == {TrialState.COMPLETED}


def test_a_searcher_create_does_not_flush_the_tick_first(tmp_path: Path) -> None:
    """A create reads the request ids (``TickRows.requests``) and inserts its trial without
    writing the tick's changes so far: they are written once, with the rest (a Core read
    flushed them first, then the GC's read flushed again)."""
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id, refs = experiment(store, tmp_path, 4)
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        rec = ExperimentReconciler(s, exp, {}, 1000.0)
        job = rec.jobs[0]
        job.reason = "changed this tick"
        s.add(job)
        rec.apply([Create(request_id=10_000, hparams={"x": 1.0}, length=100)])
        assert job in s.dirty   # not flushed by the create
        created = rec.trial_of_request(10_000)
        assert created is not None and created.id is not None
    with store.session() as s:
        got = s.get(Job, job.id)
        assert got is not None and got.reason == "changed this tick"
        assert s.get(Trial, created.id) is not None


class CountingList(list[Job]):
    """A list that counts how often it is walked."""

    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        CountingList.walks += 1
        return super().__iter__()


def test_a_tick_that_ingests_many_exits_walks_the_jobs_a_fixed_number_of_times(
        tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id, refs = experiment(store, tmp_path, 30)
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        paths = ExperimentPaths(Path(exp.run_dir))
    for tid, ref in refs.items():
        write_steps(store, exp_id, tid, 1, 2)
        with open(paths.trial(tid).exit_log, "a") as f:
            f.write(json.dumps({"job": ref, "reason": "completed", "code": 0,
                                "restart": 0}) + "\n")
    infos = {ref: JobInfo(ref=ref, state=JobState.COMPLETED, exit_code=0)
             for ref in refs.values()}
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        rec = ExperimentReconciler(s, exp, infos, 1000.0)
        rec.jobs = CountingList(rec.jobs)
        CountingList.walks = 0
        rec.run()
        walks = CountingList.walks
    with store.session() as s:
        jobs = s.exec(select(Job).where(Job.experiment_id == exp_id)).all()
    assert {j.exit_reason for j in jobs} == {"completed"}   # every record found its job
    assert walks <= 3, walks   # before: once more per exit record (a quadratic tick)


def test_nothing_to_judge_only_where_judge_waits_whatever_the_facts() -> None:
    """The prefilter a tick uses to skip gathering 7,000 pending jobs' facts never
    hides a decision: wherever it says so, ``judge`` waits under every job and trial
    fact; and it does skip the common case (queued or running, not requeued)."""
    raws = {JobState.PENDING: ["PENDING"], JobState.RUNNING: ["RUNNING", "COMPLETING"],
            JobState.SUSPENDED: ["SUSPENDED"], JobState.COMPLETED: ["COMPLETED"],
            JobState.FAILED: ["FAILED"], JobState.UNKNOWN: [""],
            JobState.PREEMPTED: ["PREEMPTED"], JobState.TIMEOUT: ["TIMEOUT"]}
    infos: list[JobInfo | None] = [None] + [
        JobInfo(ref="7_0", state=state, raw_state=raw, restart_count=rc, exit_code=0)
        for state, words in raws.items() for raw in words for rc in (0, 1, 2)]
    record = ExitRecord(ExitReason.PREEMPTED, 0, 0)
    skipped = 0
    for info in infos:
        for restart_count in (0, 1):
            if not nothing_to_judge(restart_count, info):
                continue
            skipped += 1
            for last in (None, record):
                for unknown in (0, 5):
                    for stop, killing, terminal in product((False, True), repeat=3):
                        d = judge(JobFacts(restart_count=restart_count, unknown_ticks=unknown,
                                           last_record=last, free_runs=frozenset({0})),
                                  TrialFacts(terminal=terminal, stop_requested=stop,
                                             killing=killing, restarts=0, max_restarts=0),
                                  info)
                        assert d.kind == Kind.WAIT, (info, restart_count, d)
    assert nothing_to_judge(0, JobInfo(ref="7_0", state=JobState.PENDING))
    assert not nothing_to_judge(0, JobInfo(ref="7_0", state=JobState.PENDING,
                                           restart_count=1))
    assert skipped > 10


@pytest.mark.parametrize("writers", [1, 5])
def test_a_ticks_metric_lines_are_one_insert_in_line_order(tmp_path: Path,
                                                          writers: int) -> None:
    """Every metric line a tick ingests, whatever the number of trials that wrote them,
    goes in with one INSERT (issue 47 item 2: a flush and an ORM object per line were a
    fifth of the daemon's CPU), and the rows come out as the lines were: per trial in
    line order, values and kinds kept."""
    store = Store(f"sqlite:///{tmp_path / 'd.sqlite'}")
    exp_id, refs = experiment(store, tmp_path, 8)
    running = set(sorted(refs)[:writers])
    for tid in running:
        write_steps(store, exp_id, tid, 1, 3)
    inserts: list[str] = []

    def counter(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO METRIC"):
            inserts.append(statement)

    event.listen(store.engine, "before_cursor_execute", counter)
    try:
        tick(store, exp_id, infos_for(refs, running))
    finally:
        event.remove(store.engine, "before_cursor_execute", counter)
    assert len(inserts) == 1, inserts
    with store.session() as s:
        got = s.exec(select(Metric).order_by(Metric.id)).all()  # type: ignore[arg-type]
    assert [(m.trial_id, m.kind, m.steps, m.metrics) for m in got] == [
        (tid, "training", step, {"loss": 1.0 / step})
        for tid in sorted(running) for step in (1, 2, 3)]
