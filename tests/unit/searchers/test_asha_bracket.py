"""``dethpc.searchers.asha``'s bracket bookkeeping and rung view, table-driven: which
queued trial is promoted next, what a promotion does to the bracket, how many of a rung
go on (``rung_keep``) and the bracket as ``rungs()`` shows it."""

from __future__ import annotations

from typing import Any

import pytest

from dethpc.config.model import AshaVariant
from dethpc.searchers.asha import EXITED, Bracket, BracketPlan, describe_bracket, rung_keep
from dethpc.searchers.base import Continue

PLAN = BracketPlan(num_rungs=3, max_trials=9, max_concurrent=3, lengths=(1, 3, 9))


def bracket(**state: Any) -> Bracket:
    b = Bracket.new(PLAN, divisor=3)
    for key, value in state.items():
        setattr(b, key, value)
    return b


@pytest.mark.parametrize(("queue", "trial_rung", "running", "expected"), [
    ([], {}, set(), None),
    ([4], {4: 0}, {4}, None),                          # still running: waits for its exit
    ([4, 5], {4: 0, 5: 0}, set(), 4),                  # same rung: first queued
    ([5, 4], {4: 0, 5: 0}, set(), 5),
    ([4, 5], {4: 0, 5: 1}, set(), 5),                  # the highest rung first
    ([4, 5, 6], {4: 1, 5: 0, 6: 1}, {4}, 6),
])
def test_next_promotion(queue: list[int], trial_rung: dict[int, int], running: set[int],
                        expected: int | None) -> None:
    assert bracket(queue=queue, trial_rung=trial_rung, running=running).next_promotion() \
        == expected


@pytest.mark.parametrize(("rung", "length"), [(0, 3), (1, 9)])
def test_resume_takes_a_queued_trial_one_rung_up(rung: int, length: int) -> None:
    b = bracket(queue=[7, 8], trial_rung={7: rung, 8: 0}, reported={7, 8}, running={2})
    assert b.resume(7) == Continue(request_id=7, length=length, validate_at=(length,))
    assert (b.queue, b.trial_rung[7], b.reported, b.running) == ([8], rung + 1, {8}, {2, 7})


@pytest.mark.parametrize(("recorded", "divisor", "variant", "keep"), [
    (0, 3, AshaVariant.STOPPING, 0),
    (1, 3, AshaVariant.STOPPING, 1),                   # the stopping rule keeps at least one
    (5, 3, AshaVariant.STOPPING, 1),
    (6, 3, AshaVariant.STOPPING, 2),
    (9, 2, AshaVariant.STOPPING, 4),
    (0, 3, AshaVariant.PROMOTION, 0),
    (2, 3, AshaVariant.PROMOTION, 0),                  # promotion: the top int(n / d)
    (3, 3, AshaVariant.PROMOTION, 1),
    (9, 2, AshaVariant.PROMOTION, 4),
])
def test_rung_keep(recorded: int, divisor: int, variant: AshaVariant, keep: int) -> None:
    assert rung_keep(recorded, divisor, variant) == keep


RUNGS = [[(0.1, 1), (0.2, 2), (0.3, 3), (EXITED, 4)], [(EXITED, 5)], []]


@pytest.mark.parametrize(("variant", "smaller", "rung0", "rung1"), [
    (AshaVariant.STOPPING, True, (1, 0.1), (1, None)),
    (AshaVariant.STOPPING, False, (1, -0.1), (1, None)),   # the user's sign again
    (AshaVariant.PROMOTION, True, (1, 0.1), (0, None)),
])
def test_describe_bracket(variant: AshaVariant, smaller: bool, rung0: tuple[int, float],
                          rung1: tuple[int, float | None]) -> None:
    b = bracket(rungs=[list(r) for r in RUNGS], created=5)
    got = describe_bracket(2, b, 3, variant, smaller)
    sign = 1.0 if smaller else -1.0
    assert {k: v for k, v in got.items() if k != "rungs"} == {
        "bracket": 2, "num_rungs": 3, "max_trials": 9, "max_concurrent_trials": 3,
        "created": 5}
    assert [(r["length"], r["keep"], r["cutoff"]) for r in got["rungs"]] == [
        (1, *rung0), (3, *rung1), (9, 0, None)]
    assert got["rungs"][0]["metrics"] == [
        {"request_id": 1, "metric": sign * 0.1}, {"request_id": 2, "metric": sign * 0.2},
        {"request_id": 3, "metric": sign * 0.3}, {"request_id": 4, "metric": None}]
