"""preview_search / render_preview."""

from __future__ import annotations

import pytest

from dethpc.config.model import (
    AshaVariant,
    IntHP,
    Length,
    LogHP,
    SearcherConfig,
    SearcherName,
    Unit,
)
from dethpc.searchers.preview import preview_search, render_preview

TREE = {"lr": LogHP(-4, -1, count=4), "n": IntHP(1, 3, count=3)}


@pytest.mark.parametrize(
    ("name", "max_trials", "trials", "units"),
    [("single", 9, 1, 100), ("random", 7, 7, 700), ("grid", 1, 12, 1200)],
)
def test_simple_searchers_train_every_trial_fully(name: SearcherName, max_trials: int,
                                                  trials: int, units: int) -> None:
    config = SearcherConfig(name=name, metric="loss", max_length=Length(Unit.BATCHES, 100),
                            max_trials=max_trials, max_concurrent_trials=2)
    p = preview_search(config, TREE, 0)
    assert p["total_trials"] == trials and p["total_units"] == units
    assert p["brackets"][0]["rungs"] == [
        {"length": 100, "trials_reaching": trials, "trials_ending": trials}]


@pytest.mark.parametrize("variant", ["stopping", "promotion"])
def test_asha_preview_counts(variant: AshaVariant) -> None:
    config = SearcherConfig(name="adaptive_asha", metric="loss",
                            max_length=Length(Unit.BATCHES, 256), max_trials=32,
                            max_concurrent_trials=4, variant=variant)
    p = preview_search(config, TREE, 0)
    assert [b["trials"] for b in p["brackets"]] == [24, 8]
    assert [[r["length"] for r in b["rungs"]] for b in p["brackets"]] == [[16, 64, 256],
                                                                        [64, 256]]
    for b in p["brackets"]:
        reach = [r["trials_reaching"] for r in b["rungs"]]
        assert reach[0] == b["trials"]
        assert reach == sorted(reach, reverse=True) and reach[-1] >= 1
        assert sum(r["trials_ending"] for r in b["rungs"]) == b["trials"]
        assert b["units"] == sum(r["trials_ending"] * r["length"] for r in b["rungs"])
    assert p["total_units"] < 32 * 256          # early stopping saves training
    assert preview_search(config, TREE, 0) == p  # deterministic for a seed


def test_render_preview_mentions_every_rung_and_the_total() -> None:
    config = SearcherConfig(name="adaptive_asha", metric="loss",
                            max_length=Length(Unit.EPOCHS, 16), max_trials=16,
                            max_concurrent_trials=4, divisor=2, mode="aggressive")
    p = preview_search(config, TREE, 1)
    text = render_preview(p)
    assert "adaptive_asha (stopping)" in text
    assert f"total training: {p['total_units']} epochs" in text
    for r in p["brackets"][0]["rungs"]:
        assert f"{r['length']:>10}" in text
