"""``Store.tick``/``Store.read``: a tick's read blocks share one session and one
transaction, yet each block sees every commit made before it (the write phases' in
their own sessions), its objects outlive it detached, a block that writes commits at its
end, and an error drops the shared session. Real SQLite, both journal modes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import event, inspect
from sqlmodel import Session, select

from dethpc.store import Store
from dethpc.store.models import Event, Experiment


def make_store(tmp_path: Path, journal: str, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setenv("DETHPC_SQLITE_JOURNAL", journal)
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    with store.session() as s:
        s.add(Experiment(name="a", config_yaml="{}", run_dir=str(tmp_path)))
    return store


class Begins:
    """Counts the ORM transactions begun while listening (the bench's measure of sessions)."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, *_a: object) -> None:
        self.n += 1


@pytest.fixture(params=["wal", "delete"])
def store(request: pytest.FixtureRequest, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Store:
    return make_store(tmp_path, request.param, monkeypatch)


def test_reads_of_a_tick_share_one_transaction_and_see_each_commit(store: Store) -> None:
    n = Begins()
    event.listen(Session, "after_begin", n)
    try:
        with store.tick():
            with store.read() as s:
                first = s.exec(select(Experiment)).one()
            assert inspect(first).detached and first.name == "a"
            with store.session() as w:          # a write phase, in its own session
                exp = w.exec(select(Experiment)).one()
                exp.name = "b"
                w.add(exp)
            with store.read() as s:             # sees it, not the earlier block's object
                assert s.exec(select(Experiment)).one().name == "b"
            with store.read() as s:
                assert len(list(s.exec(select(Experiment)))) == 1
        assert n.n == 2                         # the shared read one and the write
        assert first.name == "a"                # a detached object keeps what it loaded
    finally:
        event.remove(Session, "after_begin", n)


def test_a_read_block_that_writes_commits_at_its_end(store: Store) -> None:
    with store.tick():
        with store.read() as s:
            s.add(Event(experiment_id=1, kind="warning", message="x"))
        # committed already: another connection sees it while the tick goes on
        with store.session() as other:
            assert len(list(other.exec(select(Event)))) == 1
        with store.read() as s:
            exp = s.exec(select(Experiment)).one()
            exp.name = "c"
    with store.session() as s:
        assert s.exec(select(Experiment)).one().name == "c"


def test_an_error_drops_the_shared_session_and_the_next_read_opens_another(
        store: Store) -> None:
    with store.tick():
        with pytest.raises(RuntimeError), store.read() as s:
            s.add(Event(experiment_id=1, kind="warning", message="lost"))
            s.flush()
            raise RuntimeError("boom")
        with store.read() as s2:
            assert s2 is not s
            assert list(s2.exec(select(Event))) == []


def test_nested_reads_keep_the_outer_blocks_objects_attached(store: Store) -> None:
    with store.tick(), store.read() as s:
        exp = s.exec(select(Experiment)).one()
        with store.read() as inner:
            assert inner is s
        assert not inspect(exp).detached
    assert inspect(exp).detached


def test_outside_a_tick_or_on_another_thread_a_read_is_its_own_session(store: Store) -> None:
    with store.read() as a, store.read() as b:
        assert a is not b
    seen: list[Session] = []

    def other_thread() -> None:
        with store.read() as s:
            seen.append(s)
    with store.tick(), store.read() as mine:
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        assert seen[0] is not mine
    assert store._reader is None            # noqa: SLF001 - no session kept between ticks
