"""What a reconcile writes, and with how many statements (issue 47 item 2, the fourth
pass; timings are bench/daemon_cost's):

- the searcher's creates insert their trials without flushing the tick's other pending
  rows, and a tick's events go in together at its close (``insert_rows``), in the
  order recorded;
- the ingest offsets of loaded trials that ended while their job lives come with the
  open trials' in the tick's first read of them, not one get per trial and file;
- checkpoint GC reads the rows left DELETING and the policy's COMPLETED rows with one
  query.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import event
from sqlmodel import select

from dethpc.control.reconcile import ExperimentReconciler
from dethpc.control.reconcile.checkpoints import collect_garbage
from dethpc.store import Store
from dethpc.store.models import (
    Checkpoint,
    CheckpointState,
    Event,
    Experiment,
    SearcherState,
    Trial,
    TrialState,
)
from tests.unit.control.test_tick_scale import (
    config,
    experiment,
    infos_for,
    tick,
    write_steps,
)


@contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    seen: list[str] = []

    def counter(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(store.engine, "before_cursor_execute", counter)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", counter)


def test_a_ticks_creates_flush_nothing_else_and_its_events_are_one_insert(
        tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with store.session() as s:
        exp = Experiment(name="t", config_yaml=config(5), run_dir=str(run_dir))
        s.add(exp)
        s.flush()
        assert exp.id is not None
        s.add(SearcherState(experiment_id=exp.id))
        exp_id = exp.id
    with statements(store) as seen:
        tick(store, exp_id, {})   # the searcher's first call creates 5 trials
    event_inserts = [st for st in seen if st.startswith("INSERT INTO event")]
    # one INSERT for the tick's events (two: SQLAlchemy's bulk insert groups rows by the
    # columns they leave NULL, here the search's event without a trial); was one per
    # created trial's flush
    assert len(event_inserts) <= 2, event_inserts
    # the created trials' INSERTs follow one another: no flush of the tick's pending rows
    # (the events so far) per created trial, as there was
    writes = [st.split(" (")[0] for st in seen if st.startswith(("INSERT", "UPDATE"))]
    at = [i for i, w in enumerate(writes) if w == "INSERT INTO trial"]
    assert at and at == list(range(at[0], at[-1] + 1)), writes
    assert writes.index("INSERT INTO event") > at[-1], writes
    with store.session() as s:
        trials = s.exec(select(Trial).order_by(Trial.id)).all()  # type: ignore[arg-type]
        events = s.exec(select(Event).order_by(Event.id)).all()  # type: ignore[arg-type]
    assert [t.request_id for t in trials] == sorted(t.request_id for t in trials)
    created = [e for e in events if e.kind == "trial_created"]
    assert [e.trial_id for e in created] == [t.id for t in trials]
    assert [e.message for e in created] == [
        f"trial {t.id} created (request {t.request_id})" for t in trials]
    assert events[0].kind != "trial_created"   # the searcher's call, recorded first
    assert all(e.time == 1000.0 and e.experiment_id == exp_id for e in events)


def test_offsets_of_ended_trials_with_a_live_job_come_in_the_first_read(
        tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id, refs = experiment(store, tmp_path, 8)
    running = set(sorted(refs)[:6])
    for tid in running:
        write_steps(store, exp_id, tid, 1, 2)
    tick(store, exp_id, infos_for(refs, running))   # offsets stored
    ended = sorted(running)[:4]
    with store.session() as s:   # ended (a stop, say) while their jobs still run
        for tid in ended:
            trial = s.get(Trial, tid)
            assert trial is not None
            trial.state = TrialState.COMPLETED
            s.add(trial)
    for tid in running:
        write_steps(store, exp_id, tid, 3, 4)
    with statements(store) as seen:
        tick(store, exp_id, infos_for(refs, running))
    reads = [st for st in seen if st.startswith("SELECT") and "FROM ingestoffset" in st]
    # the open trials', then the ended ones' (was 29 here: a get per trial, file and ask)
    assert len(reads) <= 2, reads
    with store.session() as s:   # and their new lines were read from the stored offsets
        got = s.exec(select(Trial).where(Trial.experiment_id == exp_id)).all()
        assert {t.id: t.steps_completed for t in got if t.id in running} \
            == dict.fromkeys(sorted(running), 4)


def test_checkpoint_gc_reads_the_checkpoints_with_one_query(tmp_path: Path) -> None:
    """A full pass reads the rows a daemon left DELETING and the policy's COMPLETED rows
    in one query (was two) and hands out the same: the DELETING row, and the COMPLETED
    ones the policy drops (an ended trial keeps its latest and best: one here)."""
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id, refs = experiment(store, tmp_path, 3)
    ended = min(refs)
    with store.session() as s:
        trial = s.get(Trial, ended)
        assert trial is not None
        trial.state = TrialState.COMPLETED
        s.add(trial)
        for steps in (1, 2, 3):
            s.add(Checkpoint(uuid=f"c{steps}", experiment_id=exp_id, trial_id=ended,
                             steps_completed=steps, path=f"/ck/{steps}",
                             validation_metric=1.0, created_at=float(steps)))
        s.add(Checkpoint(uuid="left", experiment_id=exp_id, trial_id=ended,
                         steps_completed=0, path="/ck/left", state=CheckpointState.DELETING))
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        rec = ExperimentReconciler(s, exp, {}, 1000.0)
        with statements(store) as seen:
            collect_garbage(rec.rows, rec.cfg, full=True)
        partial = ExperimentReconciler(s, exp, {}, 1000.0)
        collect_garbage(partial.rows, partial.cfg, full=True, only={ended})
    reads = [st for st in seen if st.startswith("SELECT") and "FROM checkpoint" in st]
    assert len(reads) == 1, reads
    assert rec.out.delete == {"left": "/ck/left", "c2": "/ck/2", "c1": "/ck/1"}
    assert partial.out.delete == rec.out.delete   # the rows marked DELETING by the first
