"""Sampling and grid expansion (dethpc.searchers.sampling)."""

from __future__ import annotations

import json
import random

import pytest

from dethpc.common.errors import ConfigError
from dethpc.config.model import CategoricalHP, ConstHP, DoubleHP, HParamTree, IntHP, LogHP
from dethpc.searchers import sampling

TREE: HParamTree = {
    "lr": LogHP(-4.0, -1.0),
    "layers": IntHP(1, 3),
    "dropout": DoubleHP(0.0, 0.5),
    "opt": {"name": CategoricalHP(("sgd", "adam")), "momentum": ConstHP(0.9)},
}


def test_sample_respects_types_and_ranges() -> None:
    rng = random.Random(7)
    for _ in range(500):
        hp = sampling.sample(TREE, rng)
        assert 1e-4 <= hp["lr"] <= 1e-1
        assert hp["layers"] in (1, 2, 3) and isinstance(hp["layers"], int)
        assert 0.0 <= hp["dropout"] <= 0.5
        assert hp["opt"]["name"] in ("sgd", "adam")
        assert hp["opt"]["momentum"] == 0.9


def test_sample_covers_int_endpoints_and_all_categories() -> None:
    rng = random.Random(1)
    seen = [sampling.sample(TREE, rng) for _ in range(300)]
    assert {s["layers"] for s in seen} == {1, 2, 3}
    assert {s["opt"]["name"] for s in seen} == {"sgd", "adam"}


def test_sample_is_reproducible_and_independent_of_key_order() -> None:
    reordered: HParamTree = {"opt": TREE["opt"], "dropout": TREE["dropout"],
                             "layers": TREE["layers"], "lr": TREE["lr"]}
    a = sampling.sample(TREE, random.Random(3))
    b = sampling.sample(reordered, random.Random(3))
    assert a == b


@pytest.mark.parametrize(
    ("hp", "expected"),
    [
        (ConstHP("x"), ["x"]),
        (CategoricalHP((1, "a", None)), [1, "a", None]),
        (IntHP(0, 2, count=3), [0, 1, 2]),
        (IntHP(0, 2, count=100), [0, 1, 2]),          # clamped to the integers in range
        (IntHP(0, 10, count=3), [0, 5, 10]),
        (IntHP(1, 4, count=1), [3]),                  # midpoint 2.5 rounds half away from 0
        (IntHP(0, 9, count=4), [0, 3, 6, 9]),
        (DoubleHP(0.0, 1.0, count=3), [0.0, 0.5, 1.0]),
        (DoubleHP(0.0, 1.0, count=1), [0.5]),
        (LogHP(-3.0, -1.0, count=3), [1e-3, 1e-2, 1e-1]),
        (LogHP(0.0, 3.0, base=2.0, count=4), [1.0, 2.0, 4.0, 8.0]),
    ],
)
def test_grid_values(hp: sampling.HParam, expected: list[object]) -> None:
    assert sampling.grid_values(("p",), hp) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("tree", "size"),
    [
        ({}, 1),
        ({"a": ConstHP(1)}, 1),
        ({"a": IntHP(1, 3, count=10), "b": CategoricalHP(("x", "y"))}, 6),
        ({"a": LogHP(-3, -1, count=3), "n": {"b": DoubleHP(0, 1, count=4),
                                             "c": CategoricalHP((1, 2))}}, 24),
    ],
)
def test_grid_sizes(tree: HParamTree, size: int) -> None:
    points = sampling.grid(tree)
    assert len(points) == size == sampling.grid_size(tree)
    assert len({json.dumps(p, sort_keys=True) for p in points}) == size


def test_grid_order_is_stable_first_path_slowest() -> None:
    tree: HParamTree = {"b": CategoricalHP(("x", "y")), "a": IntHP(0, 1, count=2)}
    assert sampling.grid(tree) == [
        {"a": 0, "b": "x"}, {"a": 0, "b": "y"}, {"a": 1, "b": "x"}, {"a": 1, "b": "y"}]


def test_grid_keeps_nesting() -> None:
    points = sampling.grid({"opt": {"lr": DoubleHP(0, 1, count=2)}, "k": ConstHP(3)})
    assert points == [{"k": 3, "opt": {"lr": 0.0}}, {"k": 3, "opt": {"lr": 1.0}}]


@pytest.mark.parametrize(
    ("tree", "path"),
    [
        ({"lr": DoubleHP(0.0, 1.0)}, "hyperparameters.lr"),
        ({"opt": {"lr": LogHP(-3, -1)}}, "hyperparameters.opt.lr"),
        ({"n": IntHP(1, 5)}, "hyperparameters.n"),
    ],
)
def test_grid_without_count_names_the_hparam(tree: HParamTree, path: str) -> None:
    with pytest.raises(ConfigError) as err:
        sampling.grid(tree)
    assert f"grid search needs `count` on {path}" in str(err.value)


def test_rng_state_round_trips_through_json() -> None:
    rng = random.Random(11)
    rng.random()
    state = json.loads(json.dumps(sampling.rng_to_json(rng)))
    copy = sampling.rng_from_json(state)
    assert [rng.random() for _ in range(5)] == [copy.random() for _ in range(5)]
