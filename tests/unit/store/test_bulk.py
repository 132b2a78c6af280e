"""``dethpc.store.bulk.insert_rows`` (and ``insert_objects``): rows inserted in one
statement are the rows the models' constructors and the ORM write (defaults filled in,
enums, JSON and JSON null alike), in the order given, with the ids the database
assigns. Real SQLite."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlmodel import SQLModel

from dethpc.store import Store
from dethpc.store.bulk import insert_objects, insert_rows
from dethpc.store.models import Batch, Event, Experiment, Job, JobState, Metric, Trial

#: columns whose value the two writes differ in by nature (the id; a default factory's
#: clock)
VARYING = {"id", "submitted_at"}

CASES: list[tuple[type[SQLModel], list[dict[str, Any]]]] = [
    (Job, [{"experiment_id": 1, "trial_id": 2, "batch_id": 3, "array_index": 0,
            "ref": "items:1:t2-0"},
           {"experiment_id": 1, "trial_id": 3, "batch_id": 3, "array_index": 1,
            "ref": "items:1:t3-0", "state": JobState.RUNNING, "exit_code": 0}]),
    (Metric, [{"trial_id": 2, "kind": "training", "steps": 5,
               "metrics": {"loss": 0.5, "nested": {"a": [1, 2]}}, "time": 12.5},
              {"trial_id": 2, "kind": "validation", "steps": 5, "metrics": {},
               "time": 13.0}]),
    (Event, [{"experiment_id": 1, "trial_id": None, "kind": "submitted",
              "message": "batch 3", "time": 1.0},
             {"experiment_id": 1, "trial_id": 2, "kind": "warning", "message": "x",
              "time": 2.0, "data": {"k": "v"}}]),
]


def store_with_parents(db: Path) -> Store:
    """A store holding experiment 1, its trials 1-3 and batch 3 (the foreign keys)."""
    store = Store(f"sqlite:///{db}")
    with store.session() as s:
        s.add(Experiment(id=1, name="e", config_yaml="{}", run_dir="/r"))
        s.flush()
        s.add_all([Trial(id=n, experiment_id=1, request_id=n) for n in (1, 2, 3)])
        s.add(Batch(id=3, experiment_id=1))
    return store


def table_rows(db: Path, table: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        got = conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()  # noqa: S608
        typed = conn.execute(f"SELECT * FROM {table} ORDER BY id").description
        names = [d[0] for d in typed]
        types = [conn.execute(f"SELECT {', '.join(f'typeof({n})' for n in names)} "  # noqa: S608
                              f"FROM {table} ORDER BY id").fetchall()]
        return [{**{k: r[k] for k in r.keys() if k not in VARYING},
                 "_types": tuple(t for n, t in zip(names, ts, strict=True)
                                 if n not in VARYING)}
                for r, ts in zip(got, types[0], strict=True)]
    finally:
        conn.close()


@pytest.mark.parametrize(("model", "given"), CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_insert_rows_writes_what_the_orm_writes(tmp_path: Path, model: type[SQLModel],
                                                given: list[dict[str, Any]]) -> None:
    orm_db, bulk_db = tmp_path / "orm.db", tmp_path / "bulk.db"
    with store_with_parents(orm_db).session() as s:
        for row in given:
            s.add(model(**row))
    with store_with_parents(bulk_db).session() as s:
        insert_rows(s, model, given)
    table = model.__tablename__  # type: ignore[attr-defined]
    orm, bulk = table_rows(orm_db, table), table_rows(bulk_db, table)
    assert len(bulk) == len(given)
    assert bulk == orm


def test_insert_rows_keeps_the_order_and_lets_the_database_number_them(
        tmp_path: Path) -> None:
    store = store_with_parents(tmp_path / "d.db")
    with store.session() as s:
        s.add(Metric(trial_id=1, kind="training", steps=1, metrics={}, time=1.0))
    with store.session() as s:
        insert_rows(s, Metric, [{"trial_id": 1, "kind": "training", "steps": n,
                                 "metrics": {}, "time": 1.0} for n in (7, 3, 9)])
        insert_rows(s, Metric, [])
    conn = sqlite3.connect(tmp_path / "d.db")
    try:
        assert conn.execute("SELECT id, steps FROM metric ORDER BY id").fetchall() == [
            (1, 1), (2, 7), (3, 3), (4, 9)]
    finally:
        conn.close()


@pytest.mark.parametrize("returning", [True, False], ids=["returning", "sqlite-before-3.35"])
def test_insert_objects_writes_what_the_orm_writes_and_hands_back_live_objects(
        tmp_path: Path, returning: bool) -> None:
    """``insert_objects``: the same rows as the ORM's, the objects given back in order
    with their ids, persistent in the session (a later change to one is written as a
    loaded row's), and nothing else pending in the session written with them (no
    flush: a searcher's create flushed the whole tick so far)."""
    given = [{"experiment_id": 1, "request_id": n, "hparams": {"x": n / 2},
              "target_length": 10, "validate_at": [5, 10], "needs_job": True}
             for n in (7, 4, 9)]
    orm_db, bulk_db = tmp_path / "orm.db", tmp_path / "bulk.db"
    with store_with_parents(orm_db).session() as s:
        for row in given:
            s.add(Trial(**row))
    store = store_with_parents(bulk_db)
    store.engine.dialect.insert_returning = returning   # False: as SQLite before 3.35
    inserts: list[str] = []

    def counter(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.lstrip().upper().startswith("INSERT"):
            inserts.append(statement.split("(")[0].strip())

    with store.session() as s:
        pending = Event(experiment_id=1, kind="warning", message="pending")
        s.add(pending)
        event.listen(store.engine, "before_cursor_execute", counter)
        try:
            got = insert_objects(s, Trial, given)
            assert insert_objects(s, Trial, []) == []
        finally:
            event.remove(store.engine, "before_cursor_execute", counter)
        assert set(inserts) == {"INSERT INTO trial"}
        assert pending in s.new
        assert [t.request_id for t in got] == [7, 4, 9]
        assert [t.id for t in got] == [4, 5, 6]
        assert all(t in s and t not in s.new for t in got)
        got[1].steps_completed = 3   # flushed at the commit, as a loaded row's
    orm, bulk = table_rows(orm_db, "trial"), table_rows(bulk_db, "trial")
    assert [r["steps_completed"] for r in bulk] == [0, 0, 0, 0, 3, 0]
    bulk[4]["steps_completed"] = 0
    drop = {"created_at", "_types"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in bulk] \
        == [{k: v for k, v in r.items() if k not in drop} for r in orm]
