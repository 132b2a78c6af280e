"""The searcher registry: every searcher's name, keys and validation in its one spec.

A table row per registered searcher (the table must cover the registry), then a
searcher that exists only in this file: registering its spec is all it takes for
config validation to accept it and for the factory to build it.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from enum import StrEnum
from typing import Any

import pytest

from dethpc.common.errors import ConfigError
from dethpc.config import parse_experiment_config
from dethpc.config import searcher_registry as registry
from dethpc.config.model import (
    AshaMode,
    AshaVariant,
    HParamTree,
    Length,
    SearcherConfig,
    Unit,
)
from dethpc.config.searcher_registry import SearcherSpec, enum_option, int_option
from dethpc.searchers.base import Create, Shutdown
from dethpc.searchers.factory import make_searcher
from dethpc.searchers.independent import IndependentSearcher

LR = {"type": "log", "minval": -4, "maxval": -1, "base": 10}
LR_GRID = {**LR, "count": 3}


def experiment(searcher: dict[str, Any], lr: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": "t", "entrypoint": "python3 train.py",
            "hyperparameters": {"lr": lr or LR}, "searcher": searcher}


def errors(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(raw)
    return [str(e) for e in info.value.errors]


# ------------------------------------------------------------------------ the table
#: name -> (keys it owns, valid raw config, expected values, invalid raw config, exact error)
TABLE: dict[str, tuple[tuple[str, ...], dict[str, Any], dict[str, Any], dict[str, Any], str]] = {
    "single": (
        (),
        experiment({"name": "single", "metric": "m", "max_length": 5}),
        {"max_trials": 1, "max_length": Length(Unit.BATCHES, 5)},
        experiment({"name": "single", "metric": "m", "max_length": {"batches": 0}}),
        "searcher.max_length: expected {batches: N}, {records: N} or {epochs: N} with N >= 1 "
        "(a bare integer = batches), got {'batches': 0}",
    ),
    "random": (
        (),
        experiment({"name": "random", "metric": "m", "max_length": 5, "max_trials": 7}),
        {"max_trials": 7, "max_concurrent_trials": 16},
        experiment({"name": "random", "metric": "m", "max_length": 5}),
        "searcher.max_trials: required by the random searcher; expected an integer >= 1",
    ),
    "grid": (
        (),
        experiment({"name": "grid", "metric": "m", "max_length": 5}, LR_GRID),
        {"max_trials": 3},
        experiment({"name": "grid", "metric": "m", "max_length": 5}),
        "hyperparameters.lr.count: required by the grid searcher; expected an integer >= 1",
    ),
    "adaptive_asha": (
        ("mode", "divisor", "max_rungs", "bracket_rungs", "variant"),
        experiment({"name": "adaptive_asha", "metric": "m", "max_length": 64, "max_trials": 8,
                    "mode": "conservative", "divisor": 2, "max_rungs": 3,
                    "bracket_rungs": [3, 1], "variant": "promotion"}),
        {"mode": AshaMode.CONSERVATIVE, "divisor": 2, "max_rungs": 3, "bracket_rungs": (3, 1),
         "variant": AshaVariant.PROMOTION, "max_trials": 8, "options": {}},
        experiment({"name": "adaptive_asha", "metric": "m", "max_length": 64, "max_trials": 8,
                    "variant": "promote"}),
        "searcher.variant: invalid value 'promote'; did you mean 'promotion'? allowed: "
        "'stopping', 'promotion'",
    ),
}


def test_the_table_covers_every_registered_searcher() -> None:
    assert tuple(TABLE) == registry.names()


@pytest.mark.parametrize("name", list(TABLE))
def test_registered_searcher(name: str) -> None:
    keys, valid, expected, invalid, error = TABLE[name]
    spec = registry.get(name)
    assert spec.name == name
    assert spec.keys == keys
    cfg = parse_experiment_config(valid).searcher
    assert cfg.name == name
    for attr, value in expected.items():
        assert getattr(cfg, attr) == value, attr
    searcher = make_searcher(cfg, parse_experiment_config(valid).hyperparameters, 0)
    assert searcher.name == name                     # the name its snapshots carry
    assert errors(invalid) == [error]


@pytest.mark.parametrize("spec", registry.specs(), ids=registry.names())
def test_option_defaults_are_the_config_defaults(spec: SearcherSpec) -> None:
    """An owned key with a SearcherConfig field: the spec's default is the field's."""
    fields = {f.name: f.default for f in dataclasses.fields(SearcherConfig)}
    for option in spec.options:
        if option.key in fields:
            assert option.default == fields[option.key], option.key
        if option.enum is not None:
            assert isinstance(option.default, option.enum)


@pytest.mark.parametrize(("key", "enum"), [("mode", AshaMode), ("variant", AshaVariant)])
def test_asha_choices_come_from_the_enums(key: str, enum: type[StrEnum]) -> None:
    [option] = [o for o in registry.get("adaptive_asha").options if o.key == key]
    assert option.enum is enum
    found = errors(experiment({"name": "adaptive_asha", "metric": "m", "max_length": 8,
                               "max_trials": 2, key: "zzz"}))
    allowed = ", ".join(repr(m.value) for m in enum)
    assert found == [f"searcher.{key}: invalid value 'zzz'; allowed: {allowed}"]


def test_unknown_name_lists_the_registry() -> None:
    found = errors(experiment({"name": "rnadom", "metric": "m", "max_length": 5,
                               "max_trials": 2}))
    assert found == ["searcher.name: invalid value 'rnadom'; did you mean 'random'? allowed: "
                     "'single', 'random', 'grid', 'adaptive_asha'"]


def test_another_searchers_key_is_checked_and_ignored() -> None:
    """dethpc's own options (``variant``) warn under another searcher; a Determined key
    of another searcher (``divisor`` under random) is refused, as Determined does."""
    cfg = parse_experiment_config(experiment({"name": "random", "metric": "m", "max_length": 5,
                                              "max_trials": 2, "variant": "promotion"}))
    assert cfg.searcher.variant == "stopping"         # ignored: the default stays
    assert cfg.warnings == ("searcher.variant: ignored: only used by the adaptive_asha "
                            "searcher, not by 'random'",)
    assert errors(experiment({"name": "random", "metric": "m", "max_length": 5,
                              "max_trials": 2, "variant": "x"}))[0].startswith(
        "searcher.variant: invalid value 'x'")
    assert errors(experiment({"name": "random", "metric": "m", "max_length": 5,
                              "max_trials": 2, "divisor": 3}))[0].startswith(
        "searcher.divisor: unknown field 'divisor'")


def test_spec_refuses_reserved_and_repeated_keys() -> None:
    with pytest.raises(ValueError, match="reserved"):
        SearcherSpec(name="x", factory=RepeatSearcher, options=(int_option("max_trials", 1),))
    with pytest.raises(ValueError, match="twice"):
        SearcherSpec(name="x", factory=RepeatSearcher,
                     options=(int_option("k", 1), int_option("k", 2)))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(SearcherSpec(name="random", factory=RepeatSearcher))


@pytest.mark.parametrize("module", ["dethpc.config", "dethpc.config.searcher",
                                    "dethpc.config.searcher_registry", "dethpc.searchers.factory",
                                    "dethpc.searchers.asha", "dethpc.searchers.independent"])
def test_any_import_order_works_and_stays_light(module: str) -> None:
    """config -> registry -> searcher modules -> config: no cycle, whichever comes first."""
    code = (f"import sys, {module}\n"
            "from dethpc.config import searcher_registry as registry\n"
            "print(','.join(registry.names()), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["single,random,grid,adaptive_asha", "False"]


# ------------------------------------------------- a searcher defined only in this test
class Order(StrEnum):
    SAME = "same"
    FRESH = "fresh"


class RepeatSearcher(IndependentSearcher):
    """``repeats`` trials of one hparam draw (``order: fresh`` draws each anew)."""

    name = "repeat"

    def __init__(self, config: SearcherConfig, hparams: HParamTree, seed: int) -> None:
        super().__init__(config, hparams, seed, total=config.options["repeats"],
                         concurrency=config.max_concurrent_trials)
        self.order = Order(config.options["order"])
        self.first: dict[str, Any] | None = None

    def _hparams(self, index: int) -> dict[str, Any]:
        if self.first is None or self.order is Order.FRESH:
            self.first = super()._hparams(index)
        return self.first


REPEAT = SearcherSpec(
    name=RepeatSearcher.name,
    factory=RepeatSearcher,
    options=(int_option("repeats", 2, minimum=1), enum_option("order", Order, Order.SAME),
             int_option("num_rungs", 1, minimum=1)),
    max_trials=lambda ck, value, path, hparams: 1,
)


@pytest.fixture()
def repeat() -> Iterator[SearcherSpec]:
    registry.register(REPEAT)
    try:
        yield REPEAT
    finally:
        registry.unregister(REPEAT.name)


def repeat_config(**keys: Any) -> dict[str, Any]:
    return experiment({"name": "repeat", "metric": "m", "max_length": 10, **keys})


def test_a_registered_searcher_is_validated_and_built(repeat: SearcherSpec) -> None:
    cfg = parse_experiment_config(repeat_config(repeats=3, max_concurrent_trials=2))
    assert cfg.searcher.name == "repeat"
    assert cfg.searcher.options == {"repeats": 3, "order": Order.SAME, "num_rungs": 1}
    assert cfg.warnings == ()
    searcher = make_searcher(cfg.searcher, cfg.hyperparameters, 7)
    assert isinstance(searcher, RepeatSearcher)
    first = searcher.initial()
    assert [type(a) for a in first] == [Create, Create]
    assert isinstance(first[0], Create) and isinstance(first[1], Create)
    assert first[0].hparams == first[1].hparams and first[0].length == 10
    third = searcher.on_exited(1, "completed")
    assert isinstance(third[0], Create) and third[0].hparams == first[0].hparams
    searcher.on_exited(2, "completed")
    assert searcher.on_exited(3, "completed") == [Shutdown()]


def test_a_registered_searchers_keys_get_exact_errors(repeat: SearcherSpec) -> None:
    assert errors(repeat_config(repeats=0)) == [
        "searcher.repeats: expected an integer >= 1, got 0"]
    assert errors(repeat_config(order="fersh")) == [
        "searcher.order: invalid value 'fersh'; did you mean 'fresh'? allowed: 'same', 'fresh'"]
    assert errors(repeat_config(repeat=2)) == [
        "searcher.repeat: unknown field 'repeat'; did you mean 'repeats'? allowed: 'name', "
        "'metric', 'smaller_is_better', 'max_length', 'time_metric', 'max_time', 'max_trials', "
        "'max_concurrent_trials', 'stop_grace_s', 'mode', 'divisor', 'max_rungs', "
        "'bracket_rungs', 'variant', 'repeats', 'order', 'num_rungs'"]
    assert errors(experiment({"name": "repaet", "metric": "m", "max_length": 5})) == [
        "searcher.name: invalid value 'repaet'; did you mean 'repeat'? allowed: 'single', "
        "'random', 'grid', 'adaptive_asha', 'repeat'"]


def test_a_registered_searchers_keys_elsewhere(repeat: SearcherSpec) -> None:
    """Under another searcher its keys warn; a Determined key it owns is no longer ignored."""
    cfg = parse_experiment_config(experiment({"name": "random", "metric": "m",
                                              "max_length": 5, "max_trials": 2,
                                              "repeats": 4}))
    assert cfg.searcher.options == {}
    assert cfg.warnings == (
        "searcher.repeats: ignored: only used by the repeat searcher, not by 'random'",)


def test_unregistered_again_it_is_unknown() -> None:
    registry.register(REPEAT)
    registry.unregister(REPEAT.name)
    assert "repeat" not in registry.names()
    assert errors(repeat_config())[0].startswith("searcher.name: invalid value 'repeat'")
    cfg = SearcherConfig(name="repeat", metric="m", max_length=Length(Unit.BATCHES, 1),
                         options={"repeats": 1, "order": "same"})
    with pytest.raises(ConfigError, match="unknown searcher 'repeat'; allowed: single, random, "
                                          "grid, adaptive_asha"):
        make_searcher(cfg, {}, 0)


def test_num_rungs_under_random_is_refused_as_determined_does() -> None:
    assert errors(experiment({"name": "random", "metric": "m", "max_length": 5,
                              "max_trials": 2, "num_rungs": 2}))[0].startswith(
        "searcher.num_rungs: unknown field 'num_rungs'")
