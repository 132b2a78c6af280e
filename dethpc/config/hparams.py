"""The ``hyperparameters`` section: validation into an ``HParamTree``, and helpers.

Owns: ``parse_hparams`` (Determined's const/int/double/log/categorical and nested
groups), ``flatten_hparams`` (dotted names -> leaves) and ``grid_size``.
Must not: sample values (the searchers do), or read files.

Determined semantics kept: a mapping *with* a string ``type`` is one
hyperparameter; a mapping without ``type`` is a nested group; any other value
(scalar or list) is a constant.
"""

from __future__ import annotations

import math
from typing import Any

from dethpc.config._check import Checker, is_int, is_number, join, show
from dethpc.config.model import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    HParam,
    HParamTree,
    IntHP,
    LogHP,
)

HP_TYPES = ("const", "int", "double", "log", "categorical")
_FIELDS: dict[str, tuple[str, ...]] = {
    "const": ("type", "val"),
    "int": ("type", "minval", "maxval", "count"),
    "double": ("type", "minval", "maxval", "count"),
    "log": ("type", "minval", "maxval", "base", "count"),
    "categorical": ("type", "vals"),
}
_LEAF_TYPES = (ConstHP, IntHP, DoubleHP, LogHP, CategoricalHP)


def parse_hparams(ck: Checker, value: Any, path: str = "hyperparameters") -> HParamTree:
    """Validate a hyperparameter tree; problems are recorded in ``ck``."""
    tree: HParamTree = {}
    for key, item in ck.mapping(value, path).items():
        sub = join(path, str(key))
        if not isinstance(key, str) or not key:
            ck.error(sub, f"hyperparameter names must be non-empty strings, got {show(key)}")
            continue
        if "." in key:
            ck.error(sub, f"hyperparameter name {key!r} may not contain '.'; "
                          "use a nested mapping instead")
            continue
        if isinstance(item, dict) and isinstance(item.get("type"), str):
            leaf = _parse_leaf(ck, item, sub)
            if leaf is not None:
                tree[key] = leaf
        elif isinstance(item, dict):
            tree[key] = parse_hparams(ck, item, sub)
        else:
            tree[key] = ConstHP(item)
    return tree


def _parse_leaf(ck: Checker, item: dict[str, Any], path: str) -> HParam | None:
    kind = ck.choice(item["type"], join(path, "type"), HP_TYPES, None)
    if kind is None:
        return None
    ck.keys(item, path, _FIELDS[kind])
    if kind == "const":
        if "val" not in item:
            ck.error(join(path, "val"), "required for type 'const'")
        return ConstHP(item.get("val"))
    if kind == "categorical":
        return _categorical(ck, item, path)
    return _ranged(ck, item, path, kind)


def _categorical(ck: Checker, item: dict[str, Any], path: str) -> CategoricalHP | None:
    vals = item.get("vals")
    if isinstance(vals, list) and vals:
        return CategoricalHP(tuple(vals))
    ck.error(join(path, "vals"), f"expected a non-empty list of values, got {show(vals)}")
    return None


def _ranged(ck: Checker, item: dict[str, Any], path: str, kind: str) -> HParam | None:
    integer = kind == "int"
    bounds = [_bound(ck, item, name, path, integer) for name in ("minval", "maxval")]
    count = ck.integer(item.get("count"), join(path, "count"), None, minimum=1)
    base = 10.0
    if kind == "log":
        base = _log_base(ck, item.get("base"), join(path, "base"))
    lo, hi = bounds
    if lo is None or hi is None:
        return None
    if lo > hi:
        ck.error(path, f"minval ({lo!r}) must be <= maxval ({hi!r})")
        return None
    if integer:
        return IntHP(int(lo), int(hi), count)
    if kind == "double":
        return DoubleHP(float(lo), float(hi), count)
    return LogHP(float(lo), float(hi), base, count)


def _bound(ck: Checker, item: dict[str, Any], name: str, path: str,
           integer: bool) -> float | None:
    sub = join(path, name)
    value = item.get(name)
    if value is None:
        ck.error(sub, "required")
        return None
    ok = is_int(value) if integer else is_number(value) and math.isfinite(value)
    if not ok:
        ck.error(sub, f"expected {'an integer' if integer else 'a number'}, got {show(value)}")
        return None
    return float(value) if not integer else value


def _log_base(ck: Checker, value: Any, path: str) -> float:
    if value is None:
        return 10.0
    if is_number(value) and value > 0 and value != 1:
        return float(value)
    ck.error(path, f"expected a number > 0 and != 1, got {show(value)}")
    return 10.0


def flatten_hparams(tree: HParamTree, prefix: str = "") -> dict[str, HParam]:
    """Leaves of a tree keyed by dotted name: ``{"optimizer.lr": LogHP(...)}``."""
    flat: dict[str, HParam] = {}
    for key, node in tree.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(node, _LEAF_TYPES):
            flat[name] = node
        elif isinstance(node, dict):
            flat.update(flatten_hparams(node, name))
    return flat


def grid_points(hp: HParam) -> int | None:
    """How many values the grid searcher tries for ``hp`` (None: needs a count)."""
    if isinstance(hp, ConstHP):
        return 1
    if isinstance(hp, CategoricalHP):
        return len(hp.vals)
    if hp.count is None:
        return None
    if isinstance(hp, IntHP):
        return min(hp.count, hp.maxval - hp.minval + 1)
    return 1 if hp.minval == hp.maxval else hp.count


def grid_size(tree: HParamTree) -> int:
    """Number of trials of a full grid (leaves without a count count as 1)."""
    size = 1
    for hp in flatten_hparams(tree).values():
        size *= grid_points(hp) or 1
    return size
