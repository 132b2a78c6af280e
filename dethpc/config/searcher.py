"""The ``searcher`` section and training lengths: validation into ``SearcherConfig``.

Owns: ``parse_searcher`` -- the keys every searcher shares
(``dethpc.config.searcher_registry.COMMON_KEYS``: Determined's field names,
``max_length`` or Determined 0.38's ``time_metric`` + ``max_time``), Determined
fields that are ignored or searchers that are not supported, and the warnings
for keys of another searcher -- and ``parse_length`` (``{batches: N}``,
``{records: N}``, ``{epochs: N}``, a bare int = batches).
Must not: list searchers, their keys, modes or per-searcher rules: it asks
``dethpc.config.searcher_registry`` (each searcher's ``SPEC``); make search decisions;
read files.

Defaults: ``smaller_is_better`` true, ``max_concurrent_trials`` 16 (0 = no
limit), ``stop_grace_s`` 60; the searcher-owned keys' defaults are in their
specs (ASHA: ``mode`` standard, ``divisor`` 4, ``max_rungs`` 5, ``variant``
stopping). ``max_trials`` follows the searcher's rule: ``single`` always runs one
trial, ``grid`` runs the size of the grid (a given value is ignored with a
warning), the others require it. A key owned by another searcher is checked
with that searcher's parser and ignored with a warning.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

# The module, not its names: the registry imports dethpc.config._check, whose package
# import may be what is importing this module right now (a partly initialized registry).
import dethpc.config.searcher_registry as registry
from dethpc.config._check import Checker, allowed_list, did_you_mean, is_int, join, show
from dethpc.config.model import HParamTree, Length, SearcherConfig, Unit

UNITS = tuple(u.value for u in Unit)
_LENGTH_FORMS = "{batches: N}, {records: N} or {epochs: N} with N >= 1 (a bare integer = batches)"

_IGNORED_DETERMINED = {
    "source_trial_id": "deprecated in Determined and ignored; load a checkpoint in your code",
    "source_checkpoint_uuid": "deprecated in Determined and ignored; load a checkpoint in "
                              "your code",
    **{key: "ignored: Determined field with no meaning on dethpc" for key in (
        "stop_once", "budget", "train_stragglers", "num_rungs", "target_trial_steps",
        "step_budget", "unit", "population_size", "num_rounds", "length_per_round",
        "replace_function", "explore_function")},
}
#: Determined searchers dethpc does not run (unless one is registered under that name);
#: Determined 0.38 itself refuses all but pbt for new experiments (EOL)
_UNSUPPORTED = ("pbt", "custom", "adaptive", "adaptive_simple", "sync_halving")
#: SearcherConfig fields a searcher's values may fill; other owned keys go to ``options``
_FIELDS = frozenset(f.name for f in fields(SearcherConfig)) - {"options"}
_MISSING = SearcherConfig(name="", metric="")


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
        ck.error(path, "required; e.g. {name: single, metric: validation_loss}")
        return _MISSING
    data = ck.mapping(value, path)
    if not data:
        ck.error(path, f"expected a mapping with name and metric, got {show(value)}")
        return _MISSING
    data = _as_registered(ck, data, path)
    owned = registry.option_keys()
    ignored = {k: why for k, why in _IGNORED_DETERMINED.items() if k not in owned}
    ck.keys(data, path, registry.COMMON_KEYS + owned, ignored)
    spec = _spec(ck, data.get("name"), join(path, "name"))
    metric = ck.required(data, "metric", path, "the validation metric to optimize")
    metric = ck.string(metric, join(path, "metric"), "")
    length, time_metric, max_time = _target(ck, data, path)
    values = spec.validate(ck, data, path, hparams) if spec is not None else {}
    _check_foreign(ck, data, path, spec)
    return SearcherConfig(
        name=spec.name if spec is not None else "",
        metric=metric,
        smaller_is_better=ck.boolean(data.get("smaller_is_better"),
                                     join(path, "smaller_is_better"), True),
        max_length=length,
        time_metric=time_metric,
        max_time=max_time,
        max_concurrent_trials=ck.integer(data.get("max_concurrent_trials"),
                                         join(path, "max_concurrent_trials"), 16, minimum=0),
        stop_grace_s=ck.integer(data.get("stop_grace_s"), join(path, "stop_grace_s"), 60,
                                minimum=0),
        options={k: v for k, v in values.items() if k not in _FIELDS},
        **{k: v for k, v in values.items() if k in _FIELDS},
    )


def _as_registered(ck: Checker, data: dict[str, Any], path: str) -> dict[str, Any]:
    """``async_halving`` (Determined 0.38 accepts it) is one bracket of ASHA: it runs
    as ``adaptive_asha`` with ``bracket_rungs: [num_rungs]`` unless a searcher of
    that name is registered."""
    if data.get("name") != "async_halving" or registry.find("async_halving") is not None:
        return data
    out = {k: v for k, v in data.items() if k != "num_rungs"}
    out["name"] = "adaptive_asha"
    rungs = data.get("num_rungs")
    if isinstance(rungs, int) and is_int(rungs) and rungs >= 1:
        out["bracket_rungs"] = [rungs]
        out["max_rungs"] = rungs
    ck.warn(join(path, "name"), "'async_halving' runs as dethpc's adaptive_asha with one "
                                f"bracket of num_rungs ({show(rungs)}) rungs "
                                "(bracket_rungs: [num_rungs]): Determined's async_halving")
    return out


def _spec(ck: Checker, value: Any, path: str) -> registry.SearcherSpec | None:
    """The registered searcher ``value`` names; None (and an error) otherwise."""
    names = registry.names()
    if value is None:
        ck.error(path, f"required; allowed: {allowed_list(names)}")
        return None
    if isinstance(value, str) and value in _UNSUPPORTED and value not in names:
        why = ("has been removed and is not valid for new experiments (Determined 0.38 "
               "refuses it too)" if value != "pbt" else "is not supported on dethpc")
        ck.error(path, f"the {value!r} searcher {why}; allowed: {allowed_list(names)}")
        return None
    name = ck.choice(value, path, names, None)
    return None if name is None else registry.get(name)


def _check_foreign(ck: Checker, data: dict[str, Any], path: str,
                   spec: registry.SearcherSpec | None) -> None:
    """Keys that only other searchers own: checked with their owner's parser, then
    ignored with a warning naming who uses them."""
    mine = spec.keys if spec is not None else ()
    for key in registry.option_keys():
        if key in mine or data.get(key) is None:
            continue
        owners = registry.owners(key)
        sub = join(path, key)
        next(o for o in owners[0].options if o.key == key).parse(ck, data[key], sub)
        if spec is None:
            continue        # the name is wrong already: no warning about whom it is for
        who = " and ".join(o.name for o in owners)
        plural = "searchers" if len(owners) > 1 else "searcher"
        ck.warn(sub, f"ignored: only used by the {who} {plural}, not by {spec.name!r}")


def _target(ck: Checker, data: dict[str, Any],
            path: str) -> tuple[Length | None, str | None, int | None]:
    """The trial length (Determined 0.38): ``time_metric`` + ``max_time`` (ASHA), the
    legacy ``max_length``, or neither -- then a trial runs until its training code
    ends. Which searcher needs what is Determined's rule (``dethpc.config.expconf``)."""
    has_time = data.get("time_metric") is not None and data.get("max_time") is not None
    if not has_time:
        if data.get("max_length") is None:
            return None, None, None
        return parse_length(ck, data["max_length"], join(path, "max_length")), None, None
    if data.get("max_length") is not None:
        ck.warn(join(path, "max_length"), "ignored: time_metric + max_time set the length")
    unit = ck.string(data.get("time_metric"), join(path, "time_metric"), None)
    max_time = ck.integer(data.get("max_time"), join(path, "max_time"), None, minimum=1)
    if unit is None or max_time is None:
        return None, None, None
    if unit not in UNITS:
        ck.unsupported_here(join(path, "time_metric"),
                            f"time_metric {unit!r}: dethpc measures a trial's progress in "
                            f"{allowed_list(UNITS)} (the steps your code reports), not by "
                            "another metric")
        return None, None, None
    return Length(Unit(unit), max_time), unit, max_time
