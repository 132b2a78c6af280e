"""``Store.tick``/``Store.read`` on PostgreSQL: the tick's shared read transaction (READ
COMMITTED) sees a write phase's commit made after it began, and does not hold that
write up; a read block that writes commits at its end."""

from __future__ import annotations

from collections.abc import Callable

from sqlmodel import col, select

from dethpc.store import Store
from dethpc.store.models import Event, Experiment


def test_shared_reads_see_each_commit_on_postgres(pg_store: Store,
                                                  new_experiment: Callable[..., int]) -> None:
    store = pg_store
    exp_id = new_experiment("tick-reads")
    with store.tick():
        with store.read() as s:
            assert s.get(Experiment, exp_id) is not None
        with store.session() as w:                  # a write phase, its own transaction
            row = w.get(Experiment, exp_id)
            assert row is not None
            row.name = "tick-reads-b"
            w.add(row)
        with store.read() as s:
            row = s.get(Experiment, exp_id)
            assert row is not None and row.name == "tick-reads-b"
            s.add(Event(experiment_id=exp_id, kind="warning", message="from a read"))
        with store.session() as other:              # committed at the block's end
            assert len(list(other.exec(select(Event).where(
                col(Event.experiment_id) == exp_id)))) == 1
    assert store._reader is None                    # noqa: SLF001 - closed with the tick
