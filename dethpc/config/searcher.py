"""The ``searcher`` section and training lengths: validation into ``SearcherConfig``.

Owns: ``parse_searcher`` (single, random, grid, adaptive_asha with Determined's
field names, ``max_length`` or Determined 0.38's ``time_metric`` + ``max_time``)
and ``parse_length`` (``{batches: N}``, ``{records: N}``, ``{epochs: N}``, a bare
int = batches).
Must not: make search decisions (``dethpc.searchers`` does) or read files.

Defaults: ``smaller_is_better`` true, ``max_concurrent_trials`` 16 (0 = no
limit), ASHA ``mode`` standard, ``divisor`` 4, ``max_rungs`` 5, ``variant``
stopping, ``stop_grace_s`` 60. ``single`` always runs one trial; for ``grid``,
``max_trials`` is set to the size of the grid (a given value is ignored with a
warning, as the grid searcher runs every point).
"""

from __future__ import annotations

from typing import Any

from dethpc.config._check import Checker, allowed_list, did_you_mean, is_int, join, show
from dethpc.config.hparams import flatten_hparams, grid_points, grid_size
from dethpc.config.model import (
    CategoricalHP,
    ConstHP,
    HParamTree,
    Length,
    SearcherConfig,
    Unit,
)

SEARCHERS = ("single", "random", "grid", "adaptive_asha")
UNITS = tuple(u.value for u in Unit)
_LENGTH_FORMS = "{batches: N}, {records: N} or {epochs: N} with N >= 1 (a bare integer = batches)"

_COMMON = ("name", "metric", "smaller_is_better", "max_length", "time_metric", "max_time",
           "max_trials", "max_concurrent_trials", "stop_grace_s")
_ASHA = ("mode", "divisor", "max_rungs", "bracket_rungs", "variant")
_IGNORED_DETERMINED = {
    "source_trial_id": "deprecated in Determined and ignored; load a checkpoint in your code",
    "source_checkpoint_uuid": "deprecated in Determined and ignored; load a checkpoint in "
                              "your code",
    **{key: "ignored: Determined field with no meaning on dethpc" for key in (
        "stop_once", "budget", "train_stragglers", "num_rungs", "target_trial_steps",
        "step_budget", "unit", "population_size", "num_rounds", "length_per_round",
        "replace_function", "explore_function")},
}
_UNSUPPORTED = ("pbt", "custom", "adaptive", "adaptive_simple", "sync_halving")
_DEFAULT = SearcherConfig(name="single", metric="")


def parse_length(ck: Checker, value: Any, path: str) -> Length | None:
    """``{unit: N}`` or a bare int (batches); None when missing or invalid."""
    if value is None:
        return None
    if is_int(value) and value >= 1:
        return Length(Unit.BATCHES, value)
    if isinstance(value, dict) and len(value) == 1:
        (unit, count), = value.items()
        if unit in UNITS and is_int(count) and count >= 1:
            return Length(Unit(unit), count)
        if unit not in UNITS:
            ck.error(join(path, str(unit)), f"unknown unit {show(unit)}; "
                     f"{did_you_mean(str(unit), UNITS)}allowed: {allowed_list(UNITS)}")
            return None
    ck.error(path, f"expected {_LENGTH_FORMS}, got {show(value)}")
    return None


def parse_searcher(ck: Checker, value: Any, hparams: HParamTree,
                   path: str = "searcher") -> SearcherConfig:
    """Validate the searcher section; problems are recorded in ``ck``."""
    if value is None:
        ck.error(path, "required; e.g. {name: single, metric: validation_loss, "
                       "max_length: {batches: 1000}}")
        return _DEFAULT
    data = ck.mapping(value, path)
    if not data:
        ck.error(path, f"expected a mapping with name, metric and max_length, got {show(value)}")
        return _DEFAULT
    ck.keys(data, path, _COMMON + _ASHA, _IGNORED_DETERMINED)
    name = _name(ck, data.get("name"), join(path, "name"))
    metric = ck.required(data, "metric", path, "the validation metric to optimize")
    metric = ck.string(metric, join(path, "metric"), "")
    length, time_metric, max_time = _target(ck, data, path)
    if name != "adaptive_asha":
        _warn_irrelevant(ck, data, path, name)
    return SearcherConfig(
        name=name,  # type: ignore[arg-type]
        metric=metric,
        smaller_is_better=ck.boolean(data.get("smaller_is_better"),
                                     join(path, "smaller_is_better"), True),
        max_length=length,
        time_metric=time_metric,
        max_time=max_time,
        max_trials=_max_trials(ck, data, path, name, hparams),
        max_concurrent_trials=ck.integer(data.get("max_concurrent_trials"),
                                         join(path, "max_concurrent_trials"), 16, minimum=0),
        stop_grace_s=ck.integer(data.get("stop_grace_s"), join(path, "stop_grace_s"), 60,
                                minimum=0),
        **_asha(ck, data, path),
    )


def _name(ck: Checker, value: Any, path: str) -> str:
    if value is None:
        ck.error(path, f"required; allowed: {allowed_list(SEARCHERS)}")
        return "single"
    if isinstance(value, str) and value in _UNSUPPORTED:
        ck.error(path, f"searcher {value!r} is not supported on dethpc; "
                       f"allowed: {allowed_list(SEARCHERS)}")
        return "single"
    return str(ck.choice(value, path, SEARCHERS, "single"))


def _target(ck: Checker, data: dict[str, Any],
            path: str) -> tuple[Length | None, str | None, int | None]:
    """Exactly one of ``max_length`` or ``time_metric`` + ``max_time``."""
    has_length = data.get("max_length") is not None
    has_time = data.get("time_metric") is not None or data.get("max_time") is not None
    if has_length and has_time:
        ck.error(path, "give either max_length or time_metric + max_time, not both")
        return None, None, None
    if has_length:
        return parse_length(ck, data["max_length"], join(path, "max_length")), None, None
    if not has_time:
        ck.error(join(path, "max_length"), "required: max_length (e.g. {batches: 1000}) "
                 "or time_metric + max_time (e.g. time_metric: batches, max_time: 1000)")
        return None, None, None
    unit = ck.required(data, "time_metric", path, f"one of {allowed_list(UNITS)}")
    unit = ck.choice(unit, join(path, "time_metric"), UNITS, None)
    max_time = ck.required(data, "max_time", path, "the target length in time_metric units")
    max_time = ck.integer(max_time, join(path, "max_time"), None, minimum=1)
    if unit is None or max_time is None:
        return None, None, None
    return Length(Unit(unit), max_time), unit, max_time


def _max_trials(ck: Checker, data: dict[str, Any], path: str, name: str,
                hparams: HParamTree) -> int:
    sub = join(path, "max_trials")
    value = data.get("max_trials")
    if name == "single":
        if value is not None and value != 1:
            ck.warn(sub, f"ignored: the single searcher runs exactly one trial (got {show(value)})")
        return 1
    if name == "grid":
        _check_grid_counts(ck, hparams)
        size = grid_size(hparams)
        if value is not None and value != size:
            ck.warn(sub, f"ignored: the grid searcher runs every grid point ({size} trials)")
        return size
    if value is None:
        ck.error(sub, f"required by the {name} searcher; expected an integer >= 1")
        return 1
    return int(ck.integer(value, sub, 1, minimum=1))


def _check_grid_counts(ck: Checker, hparams: HParamTree) -> None:
    for dotted, hp in flatten_hparams(hparams).items():
        if grid_points(hp) is None and not isinstance(hp, ConstHP | CategoricalHP):
            ck.error(f"hyperparameters.{dotted}.count",
                     "required by the grid searcher; expected an integer >= 1")


def _asha(ck: Checker, data: dict[str, Any], path: str) -> dict[str, Any]:
    return {
        "mode": ck.choice(data.get("mode"), join(path, "mode"),
                          ("aggressive", "standard", "conservative"), "standard"),
        "divisor": ck.integer(data.get("divisor"), join(path, "divisor"), 4, minimum=2),
        "max_rungs": ck.integer(data.get("max_rungs"), join(path, "max_rungs"), 5, minimum=1),
        "bracket_rungs": ck.int_list(data.get("bracket_rungs"), join(path, "bracket_rungs"),
                                     minimum=1),
        "variant": ck.choice(data.get("variant"), join(path, "variant"),
                             ("stopping", "promotion"), "stopping"),
    }


def _warn_irrelevant(ck: Checker, data: dict[str, Any], path: str, name: str) -> None:
    for key in _ASHA:
        if data.get(key) is not None:
            ck.warn(join(path, key), f"ignored: only used by the adaptive_asha searcher, "
                                     f"not by {name!r}")
