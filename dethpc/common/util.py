"""The helpers of Determined's ``det.util`` and ``determined.common.util`` that its own
examples and tests use (``dethpc.core.determined_rules`` lists them).

Owns: ``merge_dicts`` (a recursive merge into a copy) and the YAML helpers
``yaml_safe_load``, ``yaml_safe_dump`` and ``safe_load_yaml_with_exceptions``, over
PyYAML's safe loader and dumper (Determined's use ruamel.yaml: YAML 1.2, where PyYAML
reads YAML 1.1, so ``yes``/``no``/``on``/``off`` load as booleans here).
Must not: import yaml before a helper is called (the job side imports ``dethpc.common``
on every rank), or hold anything but these helpers.
"""

from __future__ import annotations

import copy
from typing import IO, Any

from dethpc.common.errors import DethpcError


def merge_dicts(base_dict: dict[Any, Any], source_dict: dict[Any, Any]) -> dict[Any, Any]:
    """A copy of ``base_dict`` with ``source_dict``'s values put in; a dict value that
    meets a key of ``base_dict`` is merged the same way, one level down. Neither input
    changes."""
    merged = copy.deepcopy(base_dict)
    for key, value in source_dict.items():
        if key in base_dict and isinstance(value, dict) and isinstance(base_dict[key], dict):
            merged[key] = merge_dicts(base_dict[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def yaml_safe_load(f: IO[Any] | str) -> Any:
    """The document in ``f`` (a string or an open file), safely loaded."""
    import yaml

    return yaml.safe_load(f)


def yaml_safe_dump(data: Any, stream: IO[Any] | None = None,
                   default_flow_style: bool | None = None) -> Any:
    """``data`` as YAML: written to ``stream`` when given, else returned as a string."""
    import yaml

    return yaml.safe_dump(data, stream, default_flow_style=default_flow_style,
                          sort_keys=False)


def safe_load_yaml_with_exceptions(yaml_file: IO[Any] | str) -> Any:
    """``yaml_safe_load``, but a malformed document is one ``DethpcError`` naming where
    (and a key given twice is refused), not a parser traceback."""
    import yaml

    class _Strict(yaml.SafeLoader):
        pass

    def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node)  # type: ignore[no-untyped-call]
            if key in seen:
                raise DethpcError(f"YAML error: key {key!r} appears twice (line "
                                  f"{key_node.start_mark.line + 1}); keep one")
            seen.add(key)
        return loader.construct_mapping(node)

    _Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
    try:
        return yaml.load(yaml_file, Loader=_Strict)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise DethpcError(f"YAML error: {exc}") from None
