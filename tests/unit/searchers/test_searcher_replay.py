"""Searcher calls as event lines, and their replay into a fresh searcher.

A searcher fed call by call and restored from its JSON snapshot between every call
(a daemon killed after every tick) must take the same decisions, and end in the same
state, as a fresh searcher given the recorded lines in order. The lines round-trip
exactly (metric floats too)."""

from __future__ import annotations

import json
import math
import random

import pytest

from dethpc.config.model import AshaVariant, DoubleHP, Length, SearcherConfig, Unit
from dethpc.searchers import replay
from dethpc.searchers.base import Action, Continue, Create, Shutdown, Stop
from dethpc.searchers.factory import make_searcher

TREE = {"x": DoubleHP(0.0, 6.0)}


def asha(variant: AshaVariant) -> SearcherConfig:
    return SearcherConfig(name="adaptive_asha", metric="loss",
                          max_length=Length(Unit.BATCHES, 27), max_trials=12, divisor=3,
                          max_rungs=3, max_concurrent_trials=4, variant=variant)


@pytest.mark.parametrize("call", [
    replay.initial(), replay.top_up(), replay.exited(7, "stopped"),
    replay.validation(3, 0.1 + 0.2, 9), replay.validation(1, 1e-300, 27),
    replay.validation(2, -0.0, 3), replay.validation(4, math.inf, 1),
])
def test_lines_round_trip_exactly(call: replay.SearcherCall) -> None:
    line = replay.format_call(call)
    assert replay.parse_call(line) == call
    assert "\n" not in line


@pytest.mark.parametrize("line", ["", "validation request=1", "exited request=x reason=stopped",
                                  "exited request=1 reason=vanished", "initial now=1",
                                  "promote request=1"])
def test_bad_lines_are_refused_with_the_line(line: str) -> None:
    with pytest.raises(ValueError, match="not a searcher call|unknown exit reason"):
        replay.parse_call(line) if line else replay.parse_call("nonsense")


def drive_with_restarts(cfg: SearcherConfig, seed: int) -> tuple[list[str], list[Action], dict]:
    """Run a search to its end, restoring the searcher from a JSON copy of its snapshot
    before every call; return the recorded lines, every action taken, the last snapshot."""
    rng = random.Random(seed)
    lines: list[str] = []
    actions: list[Action] = []
    state: dict = {}
    todo: list[tuple[int, tuple[int, ...]]] = []

    def call(c: replay.SearcherCall) -> list[Action]:
        nonlocal state
        s = make_searcher(cfg, TREE, 5)
        if state:
            s.restore(json.loads(json.dumps(state)))
        lines.append(replay.format_call(c))
        out = replay.invoke(s, c)
        state = s.snapshot()
        actions.extend(out)
        todo.extend((a.request_id, a.validate_at) for a in out
                    if isinstance(a, Create | Continue))
        return out

    call(replay.initial())
    while todo and not any(isinstance(a, Shutdown) for a in actions):
        rid, points = todo.pop(rng.randrange(len(todo)))
        stopped = False
        for length in points:
            if Stop(rid) in call(replay.validation(rid, rng.random(), length)):
                stopped = True
                break
        call(replay.exited(rid, "stopped" if stopped else
                           "errored" if rng.random() < 0.1 else "completed"))
    return lines, actions, state


@pytest.mark.parametrize("variant", list(AshaVariant))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_replay_of_the_lines_gives_the_decisions_and_the_state(variant: AshaVariant,
                                                                seed: int) -> None:
    cfg = asha(variant)
    lines, actions, state = drive_with_restarts(cfg, seed)
    assert any(isinstance(a, Shutdown) for a in actions)
    kinds = {type(a) for a in actions}
    assert Create in kinds and (Stop in kinds or Continue in kinds), kinds
    fresh = make_searcher(cfg, TREE, 5)
    assert replay.replay(fresh, (replay.parse_call(line) for line in lines)) == actions
    assert fresh.snapshot() == state


def test_a_lost_call_shows_in_the_replay() -> None:
    """The replay is a real check: drop one validation and the decisions or the final
    state differ. (A validation fed twice is ignored by ASHA, so duplicates are caught
    by counting the lines against the metric rows, not by the replay.)"""
    cfg = asha(AshaVariant.STOPPING)
    lines, actions, state = drive_with_restarts(cfg, 1)
    validations = [i for i, line in enumerate(lines) if line.startswith("validation")]
    for i in validations[:6]:
        fresh = make_searcher(cfg, TREE, 5)
        got = replay.replay(fresh, map(replay.parse_call, lines[:i] + lines[i + 1:]))
        assert (got, fresh.snapshot()) != (actions, state), (i, lines[i])
