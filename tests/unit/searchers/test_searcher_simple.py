"""single, random and grid searchers: counts, concurrency, lengths, shutdown."""

from __future__ import annotations

import pytest

from dethpc.common.errors import ConfigError
from dethpc.config.model import (
    CategoricalHP,
    DoubleHP,
    HParamTree,
    IntHP,
    Length,
    SearcherConfig,
    SearcherName,
    Unit,
)
from dethpc.searchers.base import Action, Create, Searcher, Shutdown, target_document
from dethpc.searchers.factory import make_searcher

TREE: HParamTree = {"lr": DoubleHP(0.0, 1.0, count=3), "n": IntHP(1, 2, count=2),
                    "act": CategoricalHP(("relu", "gelu"))}


def cfg(name: SearcherName, max_trials: int = 1, conc: int = 16,
        length: int = 100) -> SearcherConfig:
    return SearcherConfig(name=name, metric="loss", max_length=Length(Unit.BATCHES, length),
                          max_trials=max_trials, max_concurrent_trials=conc)


def run_to_end(s: Searcher, reasons: list[str]) -> tuple[list[Create], int, int]:
    """Exit the oldest live trial each step with the next reason; returns creates,
    the most trials alive at once and how many Shutdowns were seen."""
    creates: list[Create] = []
    live: list[int] = []
    peak = shutdowns = 0

    def take(actions: list[Action]) -> None:
        nonlocal peak, shutdowns
        for a in actions:
            if isinstance(a, Create):
                creates.append(a)
                live.append(a.request_id)
            elif isinstance(a, Shutdown):
                shutdowns += 1
        peak = max(peak, len(live))

    take(s.initial())
    step = 0
    while live:
        rid = live.pop(0)
        take(s.on_validation(rid, 0.5, 100))
        take(s.on_exited(rid, reasons[step % len(reasons)]))
        step += 1
    return creates, peak, shutdowns


@pytest.mark.parametrize(
    ("name", "max_trials", "conc", "n_created", "peak"),
    [
        ("single", 10, 16, 1, 1),
        ("random", 10, 3, 10, 3),
        ("random", 10, 16, 10, 10),
        ("random", 2, 5, 2, 2),
        ("random", 7, 0, 7, 7),            # 0 = no limit
        ("grid", 1, 4, 12, 4),             # grid ignores max_trials: 3 * 2 * 2 points
        ("grid", 100, 16, 12, 12),
    ],
)
def test_counts_and_concurrency(name: SearcherName, max_trials: int, conc: int,
                                n_created: int, peak: int) -> None:
    s = make_searcher(cfg(name, max_trials, conc), TREE, seed=0)
    creates, seen_peak, shutdowns = run_to_end(s, ["completed", "errored", "cancelled"])
    assert len(creates) == n_created
    assert seen_peak == peak
    assert shutdowns == 1
    assert s.progress() == 1.0
    assert [c.request_id for c in creates] == list(range(1, n_created + 1))


@pytest.mark.parametrize("name", ["single", "random", "grid"])
def test_every_create_trains_to_max_length_and_validates_there(name: SearcherName) -> None:
    s = make_searcher(cfg(name, 4, 2, length=250), TREE, seed=1)
    for a in s.initial():
        assert isinstance(a, Create)
        assert a.length == 250 and a.validate_at == (250,)


def test_initial_creates_min_of_concurrency_and_trials() -> None:
    assert len(make_searcher(cfg("random", 5, 2), TREE, 0).initial()) == 2
    assert len(make_searcher(cfg("random", 2, 5), TREE, 0).initial()) == 2


def test_grid_creates_every_point_once() -> None:
    s = make_searcher(cfg("grid", 1, 100), TREE, 0)
    points = [a.hparams for a in s.initial() if isinstance(a, Create)]
    assert len(points) == 12
    assert len({(p["lr"], p["n"], p["act"]) for p in points}) == 12


def test_random_same_seed_same_hparams_other_seed_differs() -> None:
    def hps(seed: int) -> list[dict[str, object]]:
        return [a.hparams for a in make_searcher(cfg("random", 5, 5), TREE, seed).initial()
                if isinstance(a, Create)]
    assert hps(3) == hps(3)
    assert hps(3) != hps(4)


def test_records_track_status_and_metrics() -> None:
    s = make_searcher(cfg("random", 3, 3), TREE, 0)
    s.initial()
    s.on_validation(1, 0.25, 100)
    s.on_exited(1, "completed")
    s.on_exited(2, "errored")
    s.on_exited(3, "cancelled")
    recs = {r.request_id: r for r in s.trials()}
    assert recs[1].metrics == {100: 0.25} and recs[1].status == "completed"
    assert recs[2].status == "errored"
    assert recs[3].status == "stopped"


def test_exit_of_unknown_or_already_exited_trial_is_ignored() -> None:
    s = make_searcher(cfg("random", 3, 1), TREE, 0)
    s.initial()
    assert len(s.on_exited(1, "completed")) == 1
    assert s.on_exited(1, "completed") == []
    assert s.on_exited(99, "completed") == []


def test_missing_max_length_runs_until_the_code_ends() -> None:
    """Determined 0.38: no max_length is valid for single/grid/random; trials get length 0
    (no target.json) and run until their training code ends. ASHA still needs a length."""
    config = SearcherConfig(name="random", metric="loss", max_trials=2)
    creates = [a for a in make_searcher(config, TREE, 0).initial() if isinstance(a, Create)]
    assert [(c.length, c.validate_at) for c in creates] == [(0, ()), (0, ())]
    with pytest.raises(ConfigError, match="searcher.max_length"):
        make_searcher(SearcherConfig(name="adaptive_asha", metric="loss", max_trials=2),
                      TREE, 0)


def test_unknown_exit_reason_is_rejected() -> None:
    s = make_searcher(cfg("random", 2, 2), TREE, 0)
    s.initial()
    with pytest.raises(ValueError, match="exit reason"):
        s.on_exited(1, "exploded")


@pytest.mark.parametrize(("name", "total", "before", "after", "new"), [
    ("random", 5, 2, 4, 2),      # grown: two more now
    ("random", 5, 2, 9, 3),      # grown past max_trials: only what is left
    ("random", 5, 2, 2, 0),      # unchanged: nothing
    ("random", 5, 2, 1, 0),      # shrunk: nothing stops, fewer start later
    ("grid", 1, 4, 0, 8),        # 0 = no limit: every remaining grid point
    ("single", 1, 1, 5, 0),
])
def test_top_up_after_concurrency_change(name: SearcherName, total: int, before: int,
                                         after: int, new: int) -> None:
    s = make_searcher(cfg(name, total, before), TREE, 0)
    first = s.initial()
    assert make_searcher(cfg(name, total, before), TREE, 0).top_up() == []  # before initial
    s2 = make_searcher(cfg(name, total, after), TREE, 0)  # the daemon rebuilds from config
    s2.restore(s.snapshot())
    extra = s2.top_up()
    assert len([a for a in extra if isinstance(a, Create)]) == new
    ids = [a.request_id for a in [*first, *extra] if isinstance(a, Create)]
    assert len(ids) == len(set(ids))
    assert s2.top_up() == []  # idempotent: a steady tick creates nothing


@pytest.mark.parametrize(("name", "wins"), [
    ("single", True), ("random", True), ("grid", True), ("adaptive_asha", False)])
def test_target_json_says_whose_length_the_trial_trains_to(name: SearcherName,
                                                           wins: bool) -> None:
    """Determined 0.38: under single, random and grid ``fit(max_length=)`` decides and
    ``searcher.max_length`` is its default (``fit_length_wins``); ASHA's length is a rung
    that caps it. A searcher added at run time that does not say caps too."""
    doc = target_document(cfg(name, 4, 2, length=250), 250, (250,))
    assert doc == {"unit": "batches", "length": 250, "validate_at": [250],
                   "fit_length_wins": wins}


def test_a_searcher_registered_without_saying_keeps_the_cap() -> None:
    from dethpc.config import searcher_registry as registry
    from dethpc.searchers.single import SingleSearcher

    registry.register(registry.SearcherSpec(name="plugin_pool", factory=SingleSearcher))
    try:
        doc = target_document(SearcherConfig(name="plugin_pool", metric="loss"), 5, ())
    finally:
        registry.unregister("plugin_pool")
    assert doc == {"unit": "batches", "length": 5, "validate_at": [], "fit_length_wins": False}
