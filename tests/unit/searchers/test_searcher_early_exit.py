"""Early exits reported by the training code (Determined's ``EarlyExitReason``) as each
searcher takes them: ``invalid_hp`` drops the hyperparameters (random and ASHA replace
the trial, grid and single do not; ASHA forgets its metrics), ``user_requested_stop``
is any other early exit. Determined's behaviour: ``master/pkg/searcher/random.go``,
``grid.go``, ``asha_stopping.go`` (``trialExitedEarly``) at v0.38.1."""

from __future__ import annotations

import pytest

from dethpc.config.model import (
    AshaVariant,
    CategoricalHP,
    Length,
    LogHP,
    SearcherConfig,
    SearcherName,
    Unit,
)
from dethpc.searchers import replay
from dethpc.searchers.base import Action, Create, Shutdown, Stop
from dethpc.searchers.factory import make_searcher

POOL_TREE = {"act": CategoricalHP(("relu", "gelu", "tanh"))}
ASHA_TREE = {"lr": LogHP(-4.0, -1.0)}


def pool_cfg(name: SearcherName, max_trials: int = 3, conc: int = 1) -> SearcherConfig:
    return SearcherConfig(name=name, metric="loss", max_length=Length(Unit.BATCHES, 10),
                          max_trials=max_trials, max_concurrent_trials=conc)


def asha_cfg(variant: AshaVariant = "stopping", max_trials: int = 4,
             conc: int = 2) -> SearcherConfig:
    return SearcherConfig(name="adaptive_asha", metric="loss",
                          max_length=Length(Unit.BATCHES, 8), max_trials=max_trials,
                          max_concurrent_trials=conc, divisor=2, bracket_rungs=(3,),
                          variant=variant)


def creates(actions: list[Action]) -> list[int]:
    return [a.request_id for a in actions if isinstance(a, Create)]


# (searcher, reasons trial 1, 2, ... exit with; trials created in all; statuses)
@pytest.mark.parametrize(
    ("name", "reasons", "created", "statuses"),
    [
        # random: an invalid trial is replaced, the budget of 3 valid trials stays
        ("random", ["invalid_hp", "completed", "invalid_hp", "completed", "completed"], 5,
         ["invalid", "completed", "invalid", "completed", "completed"]),
        # random: user_requested_stop is a trial that ended, counted in the budget
        ("random", ["user_requested_stop", "completed", "completed"], 3,
         ["stopped", "completed", "completed"]),
        # grid: the invalid point is done; the other points still run (3 in all)
        ("grid", ["completed", "invalid_hp", "completed"], 3,
         ["completed", "invalid", "completed"]),
        # single: its one trial was invalid; nothing replaces it (Determined: "not
        # applicable", the single search creates no trial on an early exit)
        ("single", ["invalid_hp"], 1, ["invalid"]),
    ],
)
def test_pool_searchers_on_early_exits(name: SearcherName, reasons: list[str], created: int,
                                       statuses: list[str]) -> None:
    s = make_searcher(pool_cfg(name), POOL_TREE, 0)
    live = creates(s.initial())
    made, shutdowns = list(live), 0
    for reason in reasons:
        rid = live.pop(0)
        out = s.on_exited(rid, reason)
        live += creates(out)
        made += creates(out)
        shutdowns += sum(isinstance(a, Shutdown) for a in out)
    assert live == [] and len(made) == created and shutdowns == 1
    assert [r.status for r in s.trials()] == statuses
    assert s.progress() == 1.0


def test_random_invalid_trials_count_for_no_progress_and_survive_a_snapshot() -> None:
    s = make_searcher(pool_cfg("random", max_trials=2), POOL_TREE, 0)
    assert creates(s.initial()) == [1]
    assert creates(s.on_exited(1, "invalid_hp")) == [2]
    assert s.progress() == 0.0
    again = make_searcher(pool_cfg("random", max_trials=2), POOL_TREE, 0)
    again.restore(s.snapshot())
    assert creates(again.on_exited(2, "completed")) == [3]   # 1 of 2 valid: one more
    assert again.progress() == 0.5
    assert again.on_exited(3, "completed") == [Shutdown()]


@pytest.mark.parametrize("variant", ["stopping", "promotion"])
def test_asha_invalid_hp_forgets_the_metrics_and_replaces_the_trial(
        variant: AshaVariant) -> None:
    s = make_searcher(asha_cfg(variant), ASHA_TREE, 0)
    assert creates(s.initial()) == [1, 2]
    s.on_validation(1, 0.5, 2)
    s.on_validation(2, 0.1, 2)
    out = s.on_exited(2, "invalid_hp")
    assert creates(out) == [3]                        # replaced, within the 4 trials
    metrics = s.rungs()[0]["rungs"][0]["metrics"]
    assert [m["request_id"] for m in metrics] == [1]  # its 0.1 is gone
    assert {r.request_id: r.status for r in s.trials()}[2] == "invalid"
    assert s.progress() == 0.0                        # an invalid trial is no progress
    # the budget counts valid trials only: 1, 3 and two more
    seen = [1, 3]
    for rid in list(seen):
        seen += creates(s.on_exited(rid, "errored"))
    assert seen == [1, 3, 4, 5]
    assert s.on_exited(4, "errored") == []
    assert s.on_exited(5, "errored") == [Shutdown()]


def test_asha_stopping_user_requested_stop_is_worst_at_its_rung() -> None:
    s = make_searcher(asha_cfg(), ASHA_TREE, 0)
    s.initial()
    s.on_validation(1, 0.5, 2)
    assert creates(s.on_exited(2, "user_requested_stop")) == [3]
    assert [m["metric"] for m in s.rungs()[0]["rungs"][0]["metrics"]] == [0.5, None]
    assert s.on_validation(3, 0.7, 2) == [Stop(3)]     # 3rd of 3: beaten by the 0.5 only
    assert {r.request_id: r.status for r in s.trials()}[2] == "stopped"


def test_early_exit_reasons_replay_from_their_event_lines() -> None:
    for reason in ("invalid_hp", "user_requested_stop"):
        call = replay.exited(7, reason)
        assert replay.parse_call(replay.format_call(call)) == call
    with pytest.raises(ValueError, match="unknown exit reason"):
        replay.exited(7, "INVALID_HP")
