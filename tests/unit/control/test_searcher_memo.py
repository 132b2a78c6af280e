"""The searcher kept between ticks (``dethpc.control.reconcile.searcher_memo``) against a
real SQLite store: it is used only for the very snapshot text the store holds under the
same config, a tick with it stores what a tick restoring from the store stores, and the
text it stores is the JSON every reader of the column decodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlmodel import select

from dethpc.common.paths import ExperimentPaths
from dethpc.control.reconcile import ExperimentReconciler, SearcherMemo
from dethpc.control.reconcile.searcher_memo import stored_text
from dethpc.store import Store
from dethpc.store.models import Checkpoint, Experiment, SearcherState, Trial

CONFIG = """
name: memo
entrypoint: python3 train.py
hyperparameters: {x: {type: double, minval: 0.0, maxval: 1.0}}
searcher: {name: random, metric: loss, max_trials: 6, max_concurrent_trials: 3,
           max_length: {batches: 20}}
"""


def experiment(store: Store, run_dir: Path, config: str = CONFIG) -> int:
    run_dir.mkdir(parents=True)
    with store.session() as s:
        exp = Experiment(name="memo", config_yaml=config, run_dir=str(run_dir))
        s.add(exp)
        s.flush()
        assert exp.id is not None
        s.add(SearcherState(experiment_id=exp.id))
        return exp.id


def tick(store: Store, exp_id: int, memo: SearcherMemo | None) -> ExperimentReconciler:
    """One reconcile as ``Reconciling.run`` makes it: the kept searcher stored back in
    the memo once the transaction committed."""
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        rec = ExperimentReconciler(s, exp, {}, 1000.0, memo=memo)
        rec.run()
    if memo is not None:
        memo.keep(exp_id, rec.kept())
    return rec


def report(store: Store, exp_id: int, steps: int) -> None:
    """Every open trial writes a checkpoint and a validation at ``steps`` (a loss from its
    request id, best at the tenth step: the checkpoint policy keeps a best that is not
    the latest)."""
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        paths = ExperimentPaths(Path(exp.run_dir))
        trials = list(s.exec(select(Trial).where(Trial.experiment_id == exp_id)))
    for t in trials:
        assert t.id is not None
        path = paths.trial(t.id).metrics
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(json.dumps({"kind": "checkpoint", "steps": steps,
                                "uuid": f"c{t.request_id}-{steps}",
                                "metadata": {"steps_completed": steps}}) + "\n")
            f.write(json.dumps({"kind": "validation", "steps": steps, "metrics": {
                "loss": (steps % 10 + 1) * (t.request_id + 1)}}) + "\n")


def checkpoint_states(store: Store) -> dict[str, str]:
    with store.session() as s:
        return {c.uuid: c.state.value for c in s.exec(select(Checkpoint))}


def test_ticks_with_the_memo_store_what_ticks_restoring_from_the_store_do(
        tmp_path: Path) -> None:
    """Two copies of one search, ticked alike, one keeping its searcher between ticks:
    after every tick both store the same snapshot and their checkpoints are in the same
    states (the kept one's ticks apply the checkpoint policy to the trials that changed
    only, the other's to every trial), and the kept searcher was used."""
    stores = [Store(f"sqlite:///{tmp_path / name}.db") for name in ("plain", "kept")]
    ids = [experiment(st, tmp_path / f"run-{i}") for i, st in enumerate(stores)]
    memo = SearcherMemo()
    for steps in (0, 5, 10, 15):
        for st, exp_id, m in zip(stores, ids, (None, memo), strict=True):
            if steps:
                report(st, exp_id, steps)
            tick(st, exp_id, m)
        with stores[0].session() as a, stores[1].session() as b:
            assert json.loads(stored_text(a, ids[0])) == json.loads(stored_text(b, ids[1]))
        assert checkpoint_states(stores[0]) == checkpoint_states(stores[1])
    assert memo.hits == 3 and memo.misses == 1   # the first tick had nothing kept
    states = checkpoint_states(stores[1])
    assert {"DELETING", "COMPLETED"} <= set(states.values())


def test_the_kept_searcher_only_for_the_stored_text_and_config(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id = experiment(store, tmp_path / "run")
    memo = SearcherMemo()
    first = tick(store, exp_id, memo)
    kept = first.searcher
    assert tick(store, exp_id, memo).searcher is kept and memo.hits == 1
    # another writer changes the stored snapshot: the store's is restored, not the kept
    with store.session() as s:
        ss = s.get(SearcherState, exp_id)
        assert ss is not None
        ss.snapshot = {**ss.snapshot, "next_id": 99}
        s.add(ss)
    again = tick(store, exp_id, memo)
    assert again.searcher is not kept and again.searcher.snapshot()["next_id"] == 99
    assert memo.misses == 2
    # the stored config changed (an edit of the searcher's settings): made anew
    kept = again.searcher
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        exp.config_yaml = CONFIG.replace("max_trials: 6", "max_trials: 7")
        s.add(exp)
    assert tick(store, exp_id, memo).searcher is not kept and memo.misses == 3


def test_a_taken_searcher_leaves_the_memo_until_its_tick_commits(tmp_path: Path) -> None:
    """A tick that fails after changing the kept searcher must not leave it for the
    next: ``take`` removes it, and only the caller's ``keep`` after commit brings it
    back."""
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id = experiment(store, tmp_path / "run")
    memo = SearcherMemo()
    tick(store, exp_id, memo)
    assert exp_id in memo
    with pytest.raises(RuntimeError), store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        ExperimentReconciler(s, exp, {}, 1000.0, memo=memo).run()
        raise RuntimeError("the tick fails before its commit")
    assert exp_id not in memo
    assert tick(store, exp_id, memo) is not None and memo.misses == 2


def test_the_stored_text_is_the_json_the_column_reads(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp_id = experiment(store, tmp_path / "run")
    rec = tick(store, exp_id, SearcherMemo())
    with store.session() as s:
        ss = s.get(SearcherState, exp_id)
        assert ss is not None
        assert stored_text(s, exp_id) == rec.kept().text
        assert ss.snapshot == json.loads(rec.kept().text)
        assert ss.snapshot["_max_concurrent_trials"] == 3


def test_the_memo_forgets_experiments_no_longer_open(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    a = experiment(store, tmp_path / "a")
    b = experiment(store, tmp_path / "b")
    memo = SearcherMemo()
    tick(store, a, memo)
    tick(store, b, memo)
    memo.retain([b])
    assert a not in memo and b in memo
