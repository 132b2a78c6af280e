"""``--config key.sub=value`` overrides: value parsing, nesting, errors."""

from __future__ import annotations

from typing import Any

import pytest

from dethpc.common.errors import ConfigError
from dethpc.config import apply_overrides
from dethpc.config.overrides import parse_override


@pytest.mark.parametrize(
    ("item", "keys", "value"),
    [
        ("searcher.max_trials=8", ["searcher", "max_trials"], 8),
        ("hyperparameters.lr=0.1", ["hyperparameters", "lr"], 0.1),
        ("hyperparameters.lr=1e-3", ["hyperparameters", "lr"], 0.001),
        ("labels=[a,b]", ["labels"], ["a", "b"]),
        ("searcher.max_length={batches: 10}", ["searcher", "max_length"], {"batches": 10}),
        ("name=my exp", ["name"], "my exp"),
        ("entrypoint=python3 train.py --lr=0.1", ["entrypoint"], "python3 train.py --lr=0.1"),
        ("searcher.smaller_is_better=false", ["searcher", "smaller_is_better"], False),
        ("slurm.time=1:30:00", ["slurm", "time"], "1:30:00"),
        ("name='007'", ["name"], "007"),
        ("description=", ["description"], None),
        (" name = x", ["name"], "x"),
    ],
)
def test_parse_override(item: str, keys: list[str], value: Any) -> None:
    assert parse_override(item) == (keys, value)


@pytest.mark.parametrize(
    ("raw", "overrides", "expected"),
    [
        ({}, ["a.b.c=1"], {"a": {"b": {"c": 1}}}),
        ({"a": {"x": 1}}, ["a.y=2"], {"a": {"x": 1, "y": 2}}),
        ({"a": {"x": 1}}, ["a={z: 3}"], {"a": {"z": 3}}),
        ({"a": None}, ["a.b=1"], {"a": {"b": 1}}),
        ({"a": 1}, ["a=2", "a=3"], {"a": 3}),
        ({"hp": {"lr": {"type": "log"}}}, ["hp.lr=0.1"], {"hp": {"lr": 0.1}}),
    ],
)
def test_apply_overrides(raw: dict[str, Any], overrides: list[str],
                         expected: dict[str, Any]) -> None:
    assert apply_overrides(raw, overrides) == expected


def test_apply_does_not_mutate_input() -> None:
    raw = {"a": {"b": 1}}
    apply_overrides(raw, ["a.b=2", "a.c=3"])
    assert raw == {"a": {"b": 1}}


@pytest.mark.parametrize(
    ("raw", "item", "expected"),
    [
        ({}, "searcher.max_trials", "searcher.max_trials: expected key.sub=value, got "
                                    "'searcher.max_trials' (no '=')"),
        ({}, "=3", "<root>: expected a dotted key like searcher.max_trials before '=', "
                   "got '=3'"),
        ({}, "a..b=3", "a..b: expected a dotted key"),
        ({}, "a.=3", "a.: expected a dotted key"),
        ({"name": "x"}, "name.sub=1", "name.sub: cannot set a sub-field: 'name' is 'x', "
                                      "not a mapping"),
        ({"a": {"b": [1]}}, "a.b.c=1", "a.b.c: cannot set a sub-field: 'a.b' is [1], "
                                       "not a mapping"),
        ({}, "labels=[a,", "labels: cannot parse value '[a,'"),
    ],
)
def test_override_errors(raw: dict[str, Any], item: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_overrides(raw, [item])
    assert info.value.source == "--config overrides"
    assert str(info.value.errors[0]).startswith(expected), info.value.errors


def test_all_override_errors_reported() -> None:
    with pytest.raises(ConfigError) as info:
        apply_overrides({"name": "x"}, ["nokey", "ok=1", "name.x=2"])
    assert [e.path for e in info.value.errors] == ["nokey", "name.x"]
