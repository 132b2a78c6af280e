"""``dethpc.store.bulk.insert_rows`` on PostgreSQL: the database numbers the rows (no
NULL sent for a serial key), and each row read back equals the one the ORM writes from
the same values (defaults, enums, JSON and JSON null)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import text
from sqlmodel import SQLModel, col, select

from dethpc.store import Store
from dethpc.store.bulk import insert_objects, insert_rows
from dethpc.store.models import Batch, Event, Job, Metric, Trial

VARYING = {"id", "submitted_at"}


def test_bulk_rows_equal_the_orms_on_postgres(pg_store: Store,
                                              new_experiment: Callable[..., int]) -> None:
    store = pg_store
    exp_id = new_experiment("bulk")
    with store.session() as s:
        trial = Trial(experiment_id=exp_id, request_id=1)
        batch = Batch(experiment_id=exp_id)
        s.add_all([trial, batch])
        s.flush()
        assert trial.id is not None and batch.id is not None
        trial_id, batch_id = trial.id, batch.id
    cases: list[tuple[type[SQLModel], Any, dict[str, Any]]] = [
        (Job, Job.batch_id, {"experiment_id": exp_id, "trial_id": trial_id,
                             "batch_id": batch_id, "ref": "x"}),   # state: the default
        (Metric, Metric.trial_id, {"trial_id": trial_id, "kind": "validation", "steps": 5,
                                   "metrics": {"loss": 0.5}, "time": 3.0}),
        (Event, Event.experiment_id, {"experiment_id": exp_id, "kind": "warning",
                                      "message": "m", "time": 1.0}),
    ]
    for model, key, row in cases:
        with store.session() as s:
            s.add(model(**row))
        with store.session() as s:
            insert_rows(s, model, [row, row])
        with store.session() as s:
            got = [m.model_dump(exclude=VARYING) for m in s.exec(
                select(model).where(key == row[key.key]).order_by(
                    col(model.id)))]  # type: ignore[attr-defined]
        assert len(got) == 3, model
        assert got[1] == got[0] and got[2] == got[0], (model, got)
    with store.session() as s:   # the ORM writes JSON null for data=None: so does the bulk
        nulls = s.execute(text("SELECT count(*) FROM event WHERE experiment_id = :e "
                               "AND data IS NULL"), {"e": exp_id}).scalar()
    assert nulls == 0


def test_insert_objects_on_postgres_in_order_with_their_ids(
        pg_store: Store, new_experiment: Callable[..., int]) -> None:
    """``insert_objects`` on PostgreSQL (one INSERT .. RETURNING for the rows): the
    objects come back in the rows' order with the serial ids the database gave them,
    persistent in the session (a change to one is written at the commit)."""
    store = pg_store
    exp_id = new_experiment("objects")
    rows = [{"experiment_id": exp_id, "request_id": n, "hparams": {"x": n},
             "validate_at": [n], "needs_job": True} for n in (5, 2, 8, 1)]
    with store.session() as s:
        got = insert_objects(s, Trial, rows)
        assert [t.request_id for t in got] == [5, 2, 8, 1]
        ids = [t.id for t in got]
        assert all(i is not None for i in ids) and ids == sorted(ids)  # type: ignore[type-var]
        assert all(t in s and t not in s.new for t in got)
        got[2].steps_completed = 7
    with store.session() as s:
        back = {t.id: t for t in s.exec(select(Trial).where(Trial.experiment_id == exp_id))}
    assert [(back[i].request_id, back[i].hparams, back[i].steps_completed)  # type: ignore[index]
            for i in ids] == [(5, {"x": 5}, 0), (2, {"x": 2}, 0), (8, {"x": 8}, 7),
                              (1, {"x": 1}, 0)]
