"""The stopping rule checked against an independent, plainly written re-implementation.

The reference below shares no code with dethpc.searchers.asha: it learns each
trial's rung lengths from the Create actions and applies Determined's
asha_stopping rule (keep the best max(n // divisor, 1) of the n metrics recorded
at a rung; a new metric ranks ahead of equal ones) with plain lists.

The last tests prove the comparison can tell rules apart: with the implementation's
rung insert swapped for the subtly different rule (a new metric ranks *after* equal
ones), the same comparison fails for every parameter set.
"""

from __future__ import annotations

import bisect
import random

import pytest

from dethpc.config.model import AshaMode, Length, LogHP, SearcherConfig, Unit
from dethpc.searchers import asha
from dethpc.searchers.base import Action, Create, Shutdown, Stop
from dethpc.searchers.factory import make_searcher


class ReferenceStopping:
    def __init__(self, divisor: int, smaller_is_better: bool) -> None:
        self.divisor = divisor
        self.sign = 1.0 if smaller_is_better else -1.0
        self.rung_lengths: dict[int, tuple[int, ...]] = {}   # trial -> its bracket's rungs
        self.bracket_of: dict[int, tuple[int, ...]] = {}
        self.recorded: dict[tuple[tuple[int, ...], int], list[float]] = {}
        self.next_rung: dict[int, int] = {}
        self.stopped: set[int] = set()

    def created(self, trial: int, validate_at: tuple[int, ...]) -> None:
        self.rung_lengths[trial] = validate_at
        self.next_rung[trial] = 0

    def report(self, trial: int, metric: float, length: int) -> bool:
        """True when the trial must stop."""
        if trial in self.stopped:
            return False
        lengths = self.rung_lengths[trial]
        value = self.sign * metric
        while self.next_rung[trial] < len(lengths) and length >= lengths[self.next_rung[trial]]:
            rung = self.next_rung[trial]
            self.next_rung[trial] = rung + 1
            seen = self.recorded.setdefault((lengths, rung), [])
            better = 0
            for other in seen:
                if other < value:
                    better += 1
            seen.append(value)
            if rung == len(lengths) - 1:
                return False
            keep = len(seen) // self.divisor
            if keep < 1:
                keep = 1
            if better >= keep:
                self.stopped.add(trial)
                return True
        return False


def run_both(seed: int, mode: AshaMode, divisor: int, smaller: bool) -> tuple[list[int], int]:
    config = SearcherConfig(name="adaptive_asha", metric="m", smaller_is_better=smaller,
                            max_length=Length(Unit.BATCHES, 512), max_trials=40,
                            max_concurrent_trials=6, mode=mode, divisor=divisor)
    searcher = make_searcher(config, {"lr": LogHP(-4, -1)}, seed)
    ref = ReferenceStopping(divisor, smaller)
    rng = random.Random(seed)
    progress: dict[int, int] = {}          # live trial -> index of its next validation
    plans: dict[int, tuple[int, ...]] = {}
    stops: list[int] = []

    def take(actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, Create):
                plans[a.request_id] = a.validate_at
                progress[a.request_id] = 0
                ref.created(a.request_id, a.validate_at)

    take(searcher.initial())
    while progress:
        trial = rng.choice(sorted(progress))
        step = progress[trial]
        length = plans[trial][step]
        if rng.random() < 0.2:             # sometimes report between rungs too
            length = max(1, length - rng.randint(0, length // 2))
        else:
            progress[trial] = step + 1
        metric = rng.choice([rng.random(), round(rng.random(), 1)])   # plenty of ties
        out = searcher.on_validation(trial, metric, length)
        must_stop = ref.report(trial, metric, length)
        assert (Stop(trial) in out) == must_stop, (trial, length, metric)
        if must_stop:
            stops.append(trial)
        if must_stop or progress[trial] == len(plans[trial]):
            del progress[trial]
            reason = "stopped" if must_stop else "completed"
            out = searcher.on_exited(trial, reason)
            take(out)
    return stops, len(plans)


PARAMS = [("standard", 4, True), ("conservative", 2, False), ("aggressive", 3, True)]
SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("mode", "divisor", "smaller"), PARAMS)
def test_stop_decisions_match_reference(seed: int, mode: AshaMode, divisor: int,
                                        smaller: bool) -> None:
    stops, created = run_both(seed, mode, divisor, smaller)
    assert created == 40
    assert stops                            # the rule did stop something


def insert_after_equals(rung: list[tuple[float, int]], request_id: int, value: float) -> int:
    """The subtly different rule: a new metric ranks after the equal ones already there."""
    index = bisect.bisect_right([v for v, _ in rung], value)
    rung.insert(index, (value, request_id))
    return index


@pytest.mark.parametrize(("mode", "divisor", "smaller"), PARAMS)
def test_comparison_catches_ties_ranked_after_equals(monkeypatch: pytest.MonkeyPatch,
                                                     mode: AshaMode, divisor: int,
                                                     smaller: bool) -> None:
    """With the implementation switched to the other tie rule, the comparison above fails."""
    monkeypatch.setattr(asha, "insert_metric", insert_after_equals)
    caught = 0
    for seed in SEEDS:
        try:
            run_both(seed, mode, divisor, smaller)
        except AssertionError:
            caught += 1
    assert caught > 0, "the reference comparison cannot tell the two tie rules apart"


def tie_searcher() -> asha.AshaSearcher:
    """Two trials, one bracket of rungs [1, 2], divisor 2: at rung 0, keep 1 of 2."""
    s = make_searcher(SearcherConfig(name="adaptive_asha", metric="m",
                                     max_length=Length(Unit.BATCHES, 2), max_trials=2,
                                     max_concurrent_trials=2, divisor=2, bracket_rungs=(2,)),
                      {}, 0)
    assert isinstance(s, asha.AshaSearcher)
    return s


def test_a_tie_keeps_the_newcomer_in_reference_and_searcher() -> None:
    ref = ReferenceStopping(2, True)
    ref.created(1, (1, 2))
    ref.created(2, (1, 2))
    assert ref.report(1, 0.5, 1) is False
    assert ref.report(2, 0.5, 1) is False      # tie: the newcomer ranks first and continues
    s = tie_searcher()
    s.initial()
    assert s.on_validation(1, 0.5, 1) == []
    assert s.on_validation(2, 0.5, 1) == []
    assert s.on_exited(1, "completed") == []
    assert s.on_exited(2, "completed") == [Shutdown()]


def test_a_tie_stops_the_newcomer_under_the_other_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asha, "insert_metric", insert_after_equals)
    s = tie_searcher()
    s.initial()
    assert s.on_validation(1, 0.5, 1) == []
    assert s.on_validation(2, 0.5, 1) == [Stop(2)]
