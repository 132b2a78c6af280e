"""The searcher snapshot stored as its text on PostgreSQL (``searcher_memo``): the json
column takes the text by an explicit cast, reads back as the same text (so the next tick
uses the kept searcher) and decodes to the same snapshot for every other reader."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from dethpc.control.reconcile import ExperimentReconciler, SearcherMemo
from dethpc.control.reconcile.searcher_memo import stored_text
from dethpc.store import Store
from dethpc.store.models import Experiment, SearcherState

CONFIG = """
name: memo
entrypoint: python3 train.py
hyperparameters: {x: {type: double, minval: 0.0, maxval: 1.0}}
searcher: {name: random, metric: loss, max_trials: 4, max_concurrent_trials: 2,
           max_length: {batches: 20}}
"""


def test_snapshot_text_round_trips_on_postgres(pg_store: Store, tmp_path: Path,
                                               new_experiment: Callable[..., int]) -> None:
    store = pg_store
    exp_id = new_experiment("memo", CONFIG, str(tmp_path))
    memo = SearcherMemo()   # no SearcherState row yet: the first tick adds it
    for _ in range(2):
        with store.session() as s:
            exp2 = s.get(Experiment, exp_id)
            assert exp2 is not None
            rec = ExperimentReconciler(s, exp2, {}, 1000.0, memo=memo)
            rec.run()
        memo.keep(exp_id, rec.kept())
    assert memo.hits == 1 and memo.misses == 1
    with store.session() as s:
        ss = s.get(SearcherState, exp_id)
        assert ss is not None
        assert stored_text(s, exp_id) == rec.kept().text
        assert ss.snapshot == json.loads(rec.kept().text)
        assert len(ss.snapshot["running"]) == 2
