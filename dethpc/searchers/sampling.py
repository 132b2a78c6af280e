"""Hyperparameter sampling, grid expansion and RNG state serialization.

Owns: drawing one hparam dict from an ``HParamTree`` with a caller-supplied
``random.Random`` (Determined semantics: int uniform inclusive, double uniform,
log = base ** uniform(minval, maxval), categorical uniform choice, const as is;
nested dicts preserved), expanding a tree into its grid points (Determined's
``grid.go`` rules), and turning ``random.Random`` state into JSON and back.
Must not: touch the global ``random`` module, the clock or any file; decide
which trials to create (that is the searchers' job).

Traversal order is the sorted order of dotted hparam paths, so a given seed
gives the same samples whatever the key order of the YAML mapping was.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

from dethpc.common.errors import ConfigError, FieldError
from dethpc.config.hparams import flatten_hparams
from dethpc.config.model import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    HParam,
    HParamTree,
    IntHP,
    LogHP,
)


def flatten(tree: HParamTree) -> list[tuple[tuple[str, ...], HParam]]:
    """Leaves of ``tree`` as (path, hparam), sorted by path (names never contain '.':
    the config parser refuses them)."""
    return sorted(((tuple(name.split(".")), hp) for name, hp in flatten_hparams(tree).items()),
                  key=lambda leaf: leaf[0])


def _unflatten(pairs: list[tuple[tuple[str, ...], Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in pairs:
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def _empty_dicts(tree: HParamTree, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths of nested dicts without leaves, so samples keep them as ``{}``."""
    out: list[tuple[str, ...]] = []
    for key, node in tree.items():
        if isinstance(node, dict):
            if not node:
                out.append(prefix + (key,))
            else:
                out.extend(_empty_dicts(node, prefix + (key,)))
    return out


def _with_empty_dicts(tree: HParamTree, sample: dict[str, Any]) -> dict[str, Any]:
    for path in _empty_dicts(tree):
        node = sample
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node.setdefault(path[-1], {})
    return sample


# ------------------------------------------------------------------------ sampling
def sample_one(hp: HParam, rng: random.Random) -> Any:
    """One value of ``hp`` drawn with ``rng``."""
    if isinstance(hp, ConstHP):
        return hp.val
    if isinstance(hp, IntHP):
        return rng.randint(hp.minval, hp.maxval)
    if isinstance(hp, DoubleHP):
        return rng.uniform(hp.minval, hp.maxval)
    if isinstance(hp, LogHP):
        return float(hp.base ** rng.uniform(hp.minval, hp.maxval))
    if isinstance(hp, CategoricalHP):
        return hp.vals[rng.randrange(len(hp.vals))]
    raise TypeError(f"unknown hyperparameter type {type(hp).__name__}")


def sample(tree: HParamTree, rng: random.Random) -> dict[str, Any]:
    """A full hparam dict (nested like ``tree``) drawn with ``rng``."""
    pairs = [(path, sample_one(hp, rng)) for path, hp in flatten(tree)]
    return _with_empty_dicts(tree, _unflatten(pairs))


# ---------------------------------------------------------------------------- grid
def _need_count(path: tuple[str, ...]) -> ConfigError:
    name = "hyperparameters." + ".".join(path)
    return ConfigError(
        [FieldError(name, f"grid search needs `count` on {name}")],
        source="experiment config",
    )


def _linspace(lo: float, hi: float, count: int) -> list[float]:
    if count == 1:
        return [(lo + hi) / 2.0]
    return [lo + i * (hi - lo) / (count - 1) for i in range(count)]


def _round_half_away(x: float) -> int:
    """Go's ``math.Round`` (half away from zero), unlike Python's banker's ``round``."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def _dedupe(values: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def grid_values(path: tuple[str, ...], hp: HParam) -> list[Any]:
    """The grid points of one hparam (Determined ``grid.go``)."""
    if isinstance(hp, ConstHP):
        return [hp.val]
    if isinstance(hp, CategoricalHP):
        return list(hp.vals)
    if hp.count is None:
        raise _need_count(path)
    if hp.count < 1:
        name = "hyperparameters." + ".".join(path)
        raise ConfigError([FieldError(name + ".count", "must be >= 1")],
                          source="experiment config")
    if isinstance(hp, IntHP):
        count = min(hp.count, hp.maxval - hp.minval + 1)
        if count == 1:
            return [_round_half_away((hp.minval + hp.maxval) / 2.0)]
        return _dedupe([_round_half_away(x) for x in _linspace(hp.minval, hp.maxval, count)])
    if isinstance(hp, DoubleHP):
        return _linspace(hp.minval, hp.maxval, hp.count)
    return [float(hp.base ** x) for x in _linspace(hp.minval, hp.maxval, hp.count)]


def grid(tree: HParamTree) -> list[dict[str, Any]]:
    """Every grid point of ``tree``: the cartesian product of each leaf's values,
    leaves in sorted path order, the first leaf varying slowest."""
    leaves = flatten(tree)
    if not leaves:
        return [_with_empty_dicts(tree, {})]
    paths = [p for p, _ in leaves]
    value_lists = [grid_values(p, hp) for p, hp in leaves]
    return [_with_empty_dicts(tree, _unflatten(list(zip(paths, combo, strict=True))))
            for combo in itertools.product(*value_lists)]


def grid_size(tree: HParamTree) -> int:
    """Number of grid points, without building them."""
    return math.prod(len(grid_values(p, hp)) for p, hp in flatten(tree))


# ------------------------------------------------------------------------ rng state
def rng_to_json(rng: random.Random) -> list[Any]:
    """``rng.getstate()`` as JSON-friendly lists."""
    version, internal, gauss_next = rng.getstate()
    return [version, list(internal), gauss_next]


def rng_from_json(state: list[Any]) -> random.Random:
    """A ``random.Random`` in the state saved by :func:`rng_to_json`."""
    version, internal, gauss_next = state
    rng = random.Random()
    rng.setstate((int(version), tuple(int(x) for x in internal), gauss_next))
    return rng
