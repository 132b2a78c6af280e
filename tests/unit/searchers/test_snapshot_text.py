"""``Searcher.snapshot_text``: the stored text, built from kept record encodings
(``IndependentSearcher``), is character for character the plain encoding of
``snapshot()`` after every event, restore included."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from dethpc.config.model import DoubleHP, Length, SearcherConfig, Unit
from dethpc.searchers.base import Create, Searcher
from dethpc.searchers.factory import make_searcher

TREE = {"x": DoubleHP(0.0, 6.0), "y": DoubleHP(-1.0, 1.0)}
EXTRA = {"_max_concurrent_trials": 4}


def plain(s: Searcher, extra: dict[str, Any]) -> str:
    return json.dumps({**s.snapshot(), **extra}, separators=(",", ":"))


def config(name: str) -> SearcherConfig:
    return SearcherConfig(name=name, metric="loss", max_trials=12, max_concurrent_trials=4,
                          max_length=Length(Unit.BATCHES, 10))


@pytest.mark.parametrize("name", ["random", "single"])
def test_text_is_the_plain_encoding_after_every_event(name: str) -> None:
    s = make_searcher(config(name), TREE, 3)
    rng = random.Random(0)
    running = [a.request_id for a in s.initial() if isinstance(a, Create)]
    assert s.snapshot_text(EXTRA) == plain(s, EXTRA)
    while running:
        rid = running.pop(rng.randrange(len(running)))
        s.snapshot_text(EXTRA)                  # encodings kept before the record changes
        s.on_validation(rid, rng.random(), 5)
        assert s.snapshot_text(EXTRA) == plain(s, EXTRA)
        s.on_validation(rid, rng.random(), 5)   # the same length again: a new value
        assert s.snapshot_text(EXTRA) == plain(s, EXTRA)
        out = s.on_exited(rid, rng.choice(["completed", "errored", "invalid_hp"]))
        running += [a.request_id for a in out if isinstance(a, Create)]
        assert s.snapshot_text(EXTRA) == plain(s, EXTRA)
        assert s.snapshot_text({}) == plain(s, {})


def test_restore_drops_the_kept_encodings() -> None:
    s = make_searcher(config("random"), TREE, 3)
    first = [a.request_id for a in s.initial() if isinstance(a, Create)][0]
    before = json.loads(s.snapshot_text(EXTRA))
    s.on_validation(first, 0.5, 5)
    s.snapshot_text(EXTRA)                      # the record's new encoding kept
    s.restore(before)                           # back to before the validation
    assert s.snapshot_text(EXTRA) == plain(s, EXTRA)
    assert json.loads(s.snapshot_text(EXTRA))["records"][0]["metrics"] == []


def test_an_extra_key_that_replaces_one_of_the_snapshot_is_encoded_plainly() -> None:
    s = make_searcher(config("random"), TREE, 3)
    s.initial()
    assert s.snapshot_text({"next_id": 99}) == plain(s, {"next_id": 99})
    assert s.snapshot_text({"records": []}) == plain(s, {"records": []})
