"""``--config key.sub=value`` overrides applied to a raw config dict.

Owns: ``apply_overrides`` and ``parse_override``. A value is parsed as YAML
(``8`` -> int, ``1e-3`` -> float, ``[a,b]`` -> list, ``{batches: 10}`` -> dict,
anything else -> string); intermediate mappings are created as needed.
Must not: validate the result (the experiment parser does that afterwards) or
mutate the caller's dict.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, NoReturn

from dethpc.common.errors import ConfigError, FieldError
from dethpc.config._check import show
from dethpc.config._yaml import load_yaml_text
from dethpc.config._yaml_limits import DOCS as LIMITS_DOCS

SOURCE = "--config overrides"


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"a.b=1"`` -> ``(["a", "b"], 1)``; raises ConfigError when malformed."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep:
        _fail(key or item, f"expected key.sub=value, got {show(item)} (no '=')")
    parts = key.split(".")
    if not key or any(not part for part in parts):
        _fail(key, f"expected a dotted key like searcher.max_trials before '=', "
                   f"got {show(item)}")
    try:
        value = load_yaml_text(text, SOURCE)
    except ConfigError as exc:
        detail = exc.errors[0].message if exc.errors else "invalid YAML"
        hint = "" if LIMITS_DOCS in detail else "; quote it to pass a string"
        _fail(key, f"cannot parse value {show(text)} ({detail}){hint}")
    return parts, value


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A deep copy of ``raw`` with every override set; all problems in one ConfigError."""
    out = copy.deepcopy(raw)
    errors: list[FieldError] = []
    for item in overrides:
        try:
            parts, value = parse_override(item)
            _set(out, parts, value)
        except ConfigError as exc:
            errors.extend(exc.errors)
    if errors:
        raise ConfigError(errors, SOURCE)
    return out


def _set(root: dict[str, Any], parts: list[str], value: Any) -> None:
    node = root
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: depth + 1])
            _fail(".".join(parts), f"cannot set a sub-field: {where!r} is "
                                   f"{show(child)}, not a mapping")
        node = child
    node[parts[-1]] = value


def _fail(path: str, message: str) -> NoReturn:
    raise ConfigError([FieldError(path, message)], SOURCE)
