"""adaptive_asha: bracket plans, rung lengths, and fixed decisions for hand-made reports."""

from __future__ import annotations

from typing import Any

import pytest

from dethpc.common.errors import ConfigError
from dethpc.config.model import AshaMode, AshaVariant, Length, LogHP, SearcherConfig, Unit
from dethpc.searchers import asha
from dethpc.searchers.base import Action, Continue, Create, Shutdown, Stop
from dethpc.searchers.factory import make_searcher

TREE = {"lr": LogHP(-4.0, -1.0)}


def cfg(max_length: int = 8, divisor: int = 2, max_trials: int = 6, conc: int = 6,
        mode: AshaMode = "standard", max_rungs: int = 5, bracket_rungs: tuple[int, ...] = (),
        variant: AshaVariant = "stopping", smaller: bool = True) -> SearcherConfig:
    return SearcherConfig(name="adaptive_asha", metric="loss", smaller_is_better=smaller,
                          max_length=Length(Unit.BATCHES, max_length), max_trials=max_trials,
                          max_concurrent_trials=conc, mode=mode, divisor=divisor,
                          max_rungs=max_rungs, bracket_rungs=bracket_rungs, variant=variant)


# ------------------------------------------------------------------ bracket plans
@pytest.mark.parametrize(
    ("max_length", "divisor", "max_rungs", "mode", "max_trials", "bracket_rungs", "lengths"),
    [
        (256, 4, 5, "standard", 32, (), [[16, 64, 256], [64, 256]]),
        (256, 4, 5, "aggressive", 32, (), [[16, 64, 256]]),
        (256, 4, 5, "conservative", 32, (), [[16, 64, 256], [64, 256], [256]]),
        (256, 4, 5, "conservative", 1000, (), [[1, 4, 16, 64, 256], [4, 16, 64, 256],
                                               [16, 64, 256], [64, 256], [256]]),
        (256, 4, 2, "standard", 1000, (), [[64, 256], [256]]),
        # exact integer log: 1000 = 10**3 gives 4 rungs (Determined's float log gives 3)
        (1000, 10, 5, "aggressive", 1000, (), [[1, 10, 100, 1000]]),
        (100, 3, 4, "conservative", 100, (), [[3, 11, 33, 100], [11, 33, 100], [33, 100],
                                              [100]]),
        (10, 4, 5, "standard", 100, (), [[2, 10], [10]]),
        (81, 3, 5, "standard", 10, (2, 5), [[1, 3, 9, 27, 81], [27, 81]]),
        (2, 4, 5, "aggressive", 100, (3,), [[1, 1, 2]]),
        (100, 4, 5, "standard", 1, (), [[100]]),   # one trial: one rung
    ],
)
def test_rung_lengths(max_length: int, divisor: int, max_rungs: int, mode: AshaMode,
                      max_trials: int, bracket_rungs: tuple[int, ...],
                      lengths: list[list[int]]) -> None:
    config = cfg(max_length, divisor, max_trials, 16, mode, max_rungs, bracket_rungs)
    assert [list(p.lengths) for p in asha.plan_brackets(config)] == lengths


@pytest.mark.parametrize(
    ("max_trials", "divisor", "brackets", "expected"),
    [
        (32, 4, [3, 2], [24, 8]),
        (100, 3, [4, 3, 2, 1], [56, 24, 12, 8]),
        (2, 4, [3, 2, 1], [1, 1, 1]),        # every bracket gets >= 1 (sum may exceed)
        (10, 2, [1], [10]),
        (16, 4, [2, 1], [11, 5]),          # 10 + 5, remainder 1 to the first
    ],
)
def test_bracket_max_trials(max_trials: int, divisor: int, brackets: list[int],
                            expected: list[int]) -> None:
    assert asha.bracket_max_trials(max_trials, divisor, brackets) == expected


@pytest.mark.parametrize(
    ("conc", "divisor", "trials", "expected"),
    [
        (4, 4, [24, 8], [2, 2]),
        (5, 4, [10, 5, 2], [2, 2, 1]),
        (1, 4, [24, 8], [1, 1]),              # raised to one per bracket
        (0, 4, [24, 8], [8, 8]),              # automatic: max(last bracket's trials, d)
        (0, 4, [3, 1], [4, 4]),
    ],
)
def test_bracket_max_concurrent(conc: int, divisor: int, trials: list[int],
                                expected: list[int]) -> None:
    assert asha.bracket_max_concurrent(conc, divisor, trials) == expected


def test_initial_creates_fill_each_bracket_most_rungs_first() -> None:
    s = make_searcher(cfg(256, 4, 32, 4, "standard"), TREE, 0)
    creates = [a for a in s.initial() if isinstance(a, Create)]
    assert [c.validate_at for c in creates] == [(16, 64, 256)] * 2 + [(64, 256)] * 2
    assert all(c.length == 256 for c in creates)


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("searcher.divisor", {"divisor": 1}),
        ("searcher.max_trials", {"max_trials": 0}),
        ("searcher.max_rungs", {"max_rungs": 0}),
        ("searcher.bracket_rungs", {"bracket_rungs": (0,)}),
        ("searcher.max_concurrent_trials", {"conc": -1}),
    ],
)
def test_invalid_configs_name_the_field(field: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=field):
        make_searcher(cfg(**kwargs), TREE, 0)


# ------------------------------------------------------ stopping: fixed decisions
# one bracket of 3 rungs (lengths 2, 4, 8), divisor 2, all 6 trials alive at once.
# keep = max(int(n / 2), 1) of the n metrics recorded at a rung, new ties rank first.
STOPPING_SCRIPT: list[tuple[str, int, int, float, list[Action]]] = [
    ("val", 1, 2, 0.5, []),                 # rung0 [.5]          keep 1, rank 0
    ("val", 2, 2, 0.7, [Stop(2)]),          # [.5 .7]             keep 1, rank 1
    ("val", 3, 2, 0.3, []),                 # [.3 .5 .7]          keep 1, rank 0
    ("val", 4, 2, 0.4, []),                 # [.3 .4 .5 .7]       keep 2, rank 1
    ("val", 5, 2, 0.9, [Stop(5)]),          # 5 recorded          keep 2, rank 4
    ("val", 6, 2, 0.4, []),                 # tie with 4: ranks 1 keep 3
    ("val", 1, 3, 0.45, []),                # between rungs: nothing
    ("val", 1, 4, 0.45, []),                # rung1 [.45]         keep 1
    ("val", 3, 4, 0.5, [Stop(3)]),          # [.45 .5]            keep 1, rank 1
    ("val", 2, 4, 0.1, []),                 # already stopped: ignored
    ("exit", 2, 0, 0.0, []),                # budget (6) spent: no new trial
    ("val", 4, 8, 0.2, []),                 # jumps rung1 (rank 0 of 3, keep 1) and top
    ("val", 6, 4, 0.6, [Stop(6)]),          # rung1 [.2 .45 .5 .6] keep 2, rank 3
    ("val", 1, 8, 0.3, []),                 # top rung: no stop, the trial completes
]


def test_stopping_decisions_for_a_fixed_sequence() -> None:
    s = make_searcher(cfg(bracket_rungs=(3,)), TREE, 0)
    assert [a.request_id for a in s.initial() if isinstance(a, Create)] == [1, 2, 3, 4, 5, 6]
    for kind, rid, length, metric, expected in STOPPING_SCRIPT:
        got = s.on_validation(rid, metric, length) if kind == "val" else \
            s.on_exited(rid, "stopped")
        assert got == expected, (kind, rid, length, metric)
    statuses = {r.request_id: (r.status, r.rung) for r in s.trials()}
    assert statuses == {1: ("active", 2), 2: ("stopped", 0), 3: ("stopped", 1),
                        4: ("active", 2), 5: ("stopped", 0), 6: ("stopped", 1)}
    rungs = s.rungs()[0]["rungs"]
    assert [[m["request_id"] for m in r["metrics"]] for r in rungs] == \
        [[3, 6, 4, 1, 2, 5], [4, 1, 3, 6], [4, 1]]
    assert [r["cutoff"] for r in rungs] == [0.4, 0.45, 0.2]


def test_stopping_larger_is_better_flips_the_order() -> None:
    s = make_searcher(cfg(bracket_rungs=(3,), smaller=False), TREE, 0)
    s.initial()
    assert s.on_validation(1, 0.5, 2) == []
    assert s.on_validation(2, 0.7, 2) == []           # better: kept
    assert s.on_validation(3, 0.6, 2) == [Stop(3)]
    assert s.rungs()[0]["rungs"][0]["cutoff"] == 0.7


def test_stopping_creates_on_exit_until_budget_then_shuts_down() -> None:
    s = make_searcher(cfg(bracket_rungs=(3,), max_trials=4, conc=2), TREE, 0)
    assert [a.request_id for a in s.initial() if isinstance(a, Create)] == [1, 2]
    assert s.on_validation(1, 0.5, 2) == []
    assert s.on_validation(2, 0.9, 2) == [Stop(2)]
    out = s.on_exited(2, "stopped")
    assert len(out) == 1 and isinstance(out[0], Create) and out[0].request_id == 3
    out = s.on_exited(3, "errored")                    # errored: worst at rung 0, replaced
    assert [a.request_id for a in out if isinstance(a, Create)] == [4]
    assert [m["metric"] for m in s.rungs()[0]["rungs"][0]["metrics"]] == [0.5, 0.9, None]
    assert s.on_exited(1, "completed") == []
    assert s.on_exited(4, "cancelled") == [Shutdown()]
    assert {r.request_id: r.status for r in s.trials()} == \
        {1: "completed", 2: "stopped", 3: "errored", 4: "stopped"}
    assert s.progress() == 1.0


# ----------------------------------------------------- promotion: fixed decisions
# one bracket of 3 rungs (2, 4, 8), divisor 2, 4 trials, 2 at a time.
# a rung promotes its unpromoted trials among the top int(n / 2).
PROMOTION_SCRIPT: list[tuple[str, int, Any, list[Action]]] = [
    ("val", 1, (2, 0.5), []),                          # rung0 n=1: top 0
    ("exit", 1, "completed", [Create(3, {}, 2, (2,))]),
    ("val", 2, (2, 0.3), []),                          # n=2: top1 = [2] -> promote 2
    ("exit", 2, "completed", [Continue(2, 4, (4,))]),
    ("val", 3, (2, 0.9), []),                          # n=3: top1 = [2], already promoted
    ("exit", 3, "completed", [Create(4, {}, 2, (2,))]),
    ("val", 4, (2, 0.1), []),                          # n=4: top2 = [4, 2] -> promote 4
    ("exit", 4, "completed", [Continue(4, 4, (4,))]),
    ("val", 2, (4, 0.2), []),                          # rung1 n=1
    ("exit", 2, "completed", []),                      # nothing to start: budget spent
    ("val", 4, (4, 0.15), []),                         # rung1 n=2: top1 = [4]
    ("exit", 4, "completed", [Continue(4, 8, (8,))]),
    ("val", 4, (8, 0.1), []),                          # top rung
    ("exit", 4, "completed", [Shutdown()]),
]


def _strip_hparams(actions: list[Action]) -> list[Action]:
    return [Create(a.request_id, {}, a.length, a.validate_at) if isinstance(a, Create) else a
            for a in actions]


def test_promotion_decisions_for_a_fixed_sequence() -> None:
    s = make_searcher(cfg(bracket_rungs=(3,), max_trials=4, conc=2, variant="promotion"),
                      TREE, 0)
    assert _strip_hparams(s.initial()) == [Create(1, {}, 2, (2,)), Create(2, {}, 2, (2,))]
    for kind, rid, arg, expected in PROMOTION_SCRIPT:
        got = s.on_validation(rid, arg[1], arg[0]) if kind == "val" else s.on_exited(rid, arg)
        assert _strip_hparams(got) == expected, (kind, rid, arg)
    assert {r.request_id: (r.status, r.rung) for r in s.trials()} == \
        {1: ("stopped", 0), 2: ("stopped", 1), 3: ("stopped", 0), 4: ("completed", 2)}


def test_promotion_of_a_trial_still_running_waits_for_its_exit() -> None:
    s = make_searcher(cfg(bracket_rungs=(2,), max_trials=3, conc=3, variant="promotion",
                          max_length=4), TREE, 0)
    s.initial()
    assert s.on_validation(1, 0.1, 2) == []
    assert s.on_validation(2, 0.2, 2) == []            # promotes 1, which is still running
    assert [r.status for r in s.trials()] == ["promoted", "active", "active"]
    assert s.on_exited(2, "completed") == []           # 2 waits, nothing else ready
    assert s.on_exited(1, "completed") == [Continue(1, 4, (4,))]


def test_promotion_errored_trial_counts_worst_and_is_never_continued() -> None:
    s = make_searcher(cfg(bracket_rungs=(2,), max_trials=3, conc=1, variant="promotion",
                          max_length=4), TREE, 0)
    s.initial()
    s.on_validation(1, 0.1, 2)
    out = s.on_exited(1, "completed")                  # n=1: no promotion, create 2
    assert _strip_hparams(out) == [Create(2, {}, 2, (2,))]
    out = s.on_exited(2, "errored")                    # worst at rung0: n=2 -> promote 1
    assert out == [Continue(1, 4, (4,))]
    assert s.rungs()[0]["rungs"][0]["metrics"][1] == {"request_id": 2, "metric": None}


@pytest.mark.parametrize("variant", ["stopping", "promotion"])
def test_concurrency_never_exceeds_the_bracket_bounds(variant: AshaVariant) -> None:
    s = make_searcher(cfg(256, 4, 32, 4, variant=variant), TREE, 0)
    alive: set[int] = set()
    queue: list[Action] = list(s.initial())
    metric = 0.0
    created = 0
    while queue:
        a = queue.pop(0)
        if isinstance(a, Shutdown):
            assert not alive and not queue
            break
        assert isinstance(a, (Create, Continue))
        created += isinstance(a, Create)
        alive.add(a.request_id)
        assert len(alive) <= 4
        metric = (metric * 7919 + 0.123) % 1.0       # deterministic pseudo-random metrics
        stopped = False
        for length in a.validate_at:
            out = s.on_validation(a.request_id, metric + length * 1e-6, length)
            queue += [x for x in out if not isinstance(x, Stop)]
            if Stop(a.request_id) in out:
                stopped = True
                break
        alive.discard(a.request_id)
        queue += s.on_exited(a.request_id, "stopped" if stopped else "completed")
    assert created == 32
    assert s.progress() == 1.0


@pytest.mark.parametrize("variant", ["stopping", "promotion"])
def test_top_up_fills_brackets_to_a_grown_limit(variant: AshaVariant) -> None:
    small = make_searcher(cfg(max_trials=16, conc=2, variant=variant), TREE, 0)
    first = [a for a in small.initial() if isinstance(a, Create)]
    assert len(first) == 3  # Determined: at least one per bracket (3 brackets here)
    big = make_searcher(cfg(max_trials=16, conc=8, variant=variant), TREE, 0)
    big.restore(small.snapshot())
    extra = [a for a in big.top_up() if isinstance(a, Create)]
    assert len(first) + len(extra) == 8
    assert {a.request_id for a in extra}.isdisjoint(a.request_id for a in first)
    assert big.top_up() == []
