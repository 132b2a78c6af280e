"""snapshot()/restore(): JSON text mid-search, then identical decisions."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from dethpc.config.model import (
    AshaVariant,
    CategoricalHP,
    DoubleHP,
    IntHP,
    Length,
    LogHP,
    SearcherConfig,
    SearcherName,
    Unit,
)
from dethpc.searchers.base import Action, Continue, Create, Searcher, Shutdown, Stop
from dethpc.searchers.factory import make_searcher

TREE = {"lr": LogHP(-4, -1, count=3), "n": IntHP(1, 4, count=2),
        "opt": {"name": CategoricalHP(("sgd", "adam")), "wd": DoubleHP(0, 0.1, count=2)}}


class Driver:
    """Feeds a searcher a deterministic stream of events derived from its own actions."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.todo: list[tuple[int, tuple[int, ...]]] = []
        self.log: list[Any] = []
        self.done = False

    def take(self, actions: list[Action]) -> None:
        for a in actions:
            self.log.append(a)
            if isinstance(a, (Create, Continue)):
                self.todo.append((a.request_id, a.validate_at))
            elif isinstance(a, Shutdown):
                self.done = True

    def step(self, s: Searcher) -> None:
        rid, points = self.todo.pop(self.rng.randrange(len(self.todo)))
        for length in points:
            out = s.on_validation(rid, self.rng.random(), length)
            self.take([a for a in out if not isinstance(a, Stop)])
            if Stop(rid) in out:
                self.log.append(Stop(rid))
                self.take(s.on_exited(rid, "stopped"))
                return
        reason = "errored" if self.rng.random() < 0.1 else "completed"
        self.take(s.on_exited(rid, reason))


CASES: list[tuple[SearcherName, AshaVariant]] = [
    ("single", "stopping"), ("random", "stopping"), ("grid", "stopping"),
    ("adaptive_asha", "stopping"), ("adaptive_asha", "promotion"),
]


@pytest.mark.parametrize(("name", "variant"), CASES)
def test_restore_continues_identically(name: SearcherName, variant: AshaVariant) -> None:
    config = SearcherConfig(name=name, metric="loss", max_length=Length(Unit.BATCHES, 64),
                            max_trials=24, max_concurrent_trials=3, divisor=2,
                            variant=variant)
    straight = make_searcher(config, TREE, seed=5)
    driver = Driver(9)
    driver.take(straight.initial())
    for _ in range(8):
        if driver.todo:
            driver.step(straight)

    text = json.dumps(straight.snapshot())
    resumed = make_searcher(config, TREE, seed=12345)      # the seed must not matter now
    resumed.restore(json.loads(text))
    twin = copy.deepcopy(driver)
    assert resumed.snapshot() == json.loads(text)

    while driver.todo:
        driver.step(straight)
        twin.step(resumed)
    assert twin.log == driver.log
    assert driver.done and twin.done
    assert [vars(r) for r in resumed.trials()] == [vars(r) for r in straight.trials()]
    assert resumed.rungs() == straight.rungs()


def test_restore_rejects_a_snapshot_of_another_searcher() -> None:
    config = SearcherConfig(name="random", metric="loss", max_length=Length(Unit.BATCHES, 8),
                            max_trials=2)
    other = SearcherConfig(name="adaptive_asha", metric="loss",
                           max_length=Length(Unit.BATCHES, 8), max_trials=2)
    snap = make_searcher(config, TREE, 0).snapshot()
    with pytest.raises(ValueError):
        make_searcher(other, TREE, 0).restore(snap)


# ------------------------------------------------------- snapshots the store already holds
#: snapshots (and the decisions around them) saved by the searchers as they were before
#: the registry refactor; a stored snapshot must restore and continue the same way
GOLDEN = Path(__file__).parent / "data" / "searcher_snapshots_v1.json"


@pytest.mark.parametrize(("name", "variant"), CASES)
def test_saved_snapshot_restores_and_continues(name: SearcherName,
                                               variant: AshaVariant) -> None:
    saved = json.loads(GOLDEN.read_text())[f"{name}/{variant}"]
    config = SearcherConfig(name=name, metric="loss", max_length=Length(Unit.BATCHES, 64),
                            max_trials=24, max_concurrent_trials=3, divisor=2,
                            variant=variant)
    straight = make_searcher(config, TREE, seed=5)
    driver = Driver(9)
    driver.take(straight.initial())
    for _ in range(8):
        if driver.todo:
            driver.step(straight)
    assert [repr(a) for a in driver.log] == saved["log_before"]
    assert json.loads(json.dumps(straight.snapshot())) == saved["snapshot"]   # same format

    resumed = make_searcher(config, TREE, seed=0)
    resumed.restore(saved["snapshot"])
    before = len(driver.log)
    while driver.todo:
        driver.step(resumed)
    assert [repr(a) for a in driver.log[before:]] == saved["log_after"]
    assert [vars(r) | {"metrics": [list(m) for m in sorted(r.metrics.items())]}
            for r in resumed.trials()] == saved["trials"]
    assert resumed.rungs() == saved["rungs"]
