"""YAML reading and writing for configs, with YAML-1.2-like number rules.

Owns: ``load_yaml_text`` / ``load_yaml_file`` / ``load_stored_yaml`` / ``dump_yaml`` and
the loader/dumper classes: the one place where dethpc parses YAML a user wrote (or a
config the store holds), each read under the bounds of ``dethpc.config._yaml_limits``.
Must not: validate configs (that is ``dethpc.config.experiment`` / ``cluster``).

Why a custom loader: PyYAML follows YAML 1.1, where an unquoted ``01:00:00`` is
the base-60 integer 3600 (a Slurm walltime would silently become 60 hours) and
``1e-3`` is a *string* (a learning rate would be rejected). This loader reads
``01:00:00`` as a string and ``1e-3`` as a float, like YAML 1.2 does. The
dumper quotes every string that either rule set would read as a number, so
``config.yaml`` round-trips through any YAML reader. Duplicate keys are an
error (YAML 1.2) instead of PyYAML's silent last-one-wins.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from dethpc.common.errors import ConfigError, FieldError
from dethpc.config._yaml_limits import (
    STORED_LIMITS,
    USER_LIMITS,
    BoundedLoading,
    YamlLimitError,
    YamlLimits,
)

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MAP_TAG = "tag:yaml.org,2002:map"
_MERGE_TAG = "tag:yaml.org,2002:merge"

#: YAML 1.1 ints without the base-60 form.
_INT_RE = re.compile(
    r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"
)
#: floats with a dot and/or an exponent (sign optional), inf and nan; no base 60.
_FLOAT_RE = re.compile(
    r"^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?"
    r"|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
    r"|[0-9][0-9_]*[eE][-+]?[0-9]+"
    r"|\.(?:inf|Inf|INF))"
    r"|\.(?:nan|NaN|NAN))$"
)
_NUMBER_FIRST = list("-+0123456789.")


class ConfigLoader(yaml.SafeLoader):
    """SafeLoader without base-60 numbers, with ``1e-3`` read as a float."""


ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver(_INT_TAG, _INT_RE, _NUMBER_FIRST)
ConfigLoader.add_implicit_resolver(_FLOAT_TAG, _FLOAT_RE, _NUMBER_FIRST)


def _construct_map(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Any:
    """The safe mapping constructor, refusing duplicate keys (YAML 1.2 forbids them;
    PyYAML silently keeps the last one, so a second ``searcher:`` would win)."""
    first: dict[str, int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
            continue
        line = key_node.start_mark.line + 1
        if key_node.value in first:
            raise yaml.constructor.ConstructorError(
                None, None,
                f"duplicate key {key_node.value!r} (first defined at line "
                f"{first[key_node.value]})",
                key_node.start_mark)
        first[key_node.value] = line
    return loader.construct_yaml_map(node)


ConfigLoader.add_constructor(_MAP_TAG, _construct_map)


class ConfigDumper(yaml.SafeDumper):
    """SafeDumper that also quotes strings our loader would read as floats."""


ConfigDumper.add_implicit_resolver(_FLOAT_TAG, _FLOAT_RE, _NUMBER_FIRST)


class _UserLoader(BoundedLoading, ConfigLoader):
    """``ConfigLoader`` under ``YamlLimits``."""


class _StoredLoader(BoundedLoading, yaml.SafeLoader):
    """PyYAML's safe loader (the rules the store's texts were always read with) under
    ``YamlLimits``."""


def load_yaml_text(text: str, source: str, limits: YamlLimits = USER_LIMITS) -> Any:
    """Parse YAML text a user wrote; a syntax error becomes a ConfigError with line and
    column, a document over ``limits`` one that says which bound and what to do."""
    return _load(_UserLoader, text, source, limits)


def load_stored_yaml(text: str, source: str = "the stored config") -> Any:
    """Parse a config the store holds (``dump_config``'s text) with PyYAML's safe rules,
    under ``STORED_LIMITS``: a document stored before the bounds existed (an alias bomb
    submitted by an older dethpc) is refused by a ConfigError, not expanded."""
    return _load(_StoredLoader, text, source, STORED_LIMITS)


def _load(loader_class: type[BoundedLoading], text: str, source: str,
          limits: YamlLimits) -> Any:
    if limits.max_chars is not None and len(text) > limits.max_chars:
        raise ConfigError([FieldError("", _too_long(f"{len(text):,} characters",
                                                    limits.max_chars))], source)
    loader: Any = None
    try:
        loader = loader_class(text)  # type: ignore[call-arg]
        loader.limits = limits
        return loader.get_single_data()
    except YamlLimitError as exc:
        raise ConfigError([FieldError("", str(exc))], source) from None
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([FieldError("", _describe_yaml_error(exc))], source) from None
    except yaml.YAMLError as exc:
        raise ConfigError([FieldError("", f"invalid YAML: {exc}")], source) from None
    except RecursionError:  # a net under the depth bounds: never a traceback
        raise ConfigError([FieldError("", "nested too deeply for Python's stack (docs/"
                                      "config.md, section 'YAML limits')")], source) from None
    finally:
        if loader is not None:
            loader.dispose()


def _too_long(size: str, cap: int) -> str:
    return (f"{size} of YAML; a document may have at most {cap:,} characters; "
            f"move bulk data into a file of the model directory "
            f"(docs/config.md, section 'YAML limits')")


def _describe_yaml_error(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = exc.problem or exc.context or "syntax error"
    return f"invalid YAML{where}: {problem}"


def dump_yaml(data: Any) -> str:
    """YAML text with keys in insertion order (deterministic for a given dict)."""
    return yaml.dump(
        data,
        Dumper=ConfigDumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
    )


def load_yaml_file(path: str | Path, limits: YamlLimits = USER_LIMITS) -> Any:
    """``load_yaml_text`` of a file; a missing or unreadable file is a ``ConfigError``
    naming it, as a bad value in it is; so is one too large to read (its size is
    checked before it is read: 4 bytes a character at most)."""
    source = str(path)
    try:
        file = Path(path).expanduser()
        size = file.stat().st_size
        if limits.max_chars is not None and size > 4 * limits.max_chars:
            raise ConfigError([FieldError("", _too_long(f"{size:,} bytes",
                                                        limits.max_chars))], source)
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([FieldError("", "file not found")], source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([FieldError("", f"cannot read the file: {exc}")], source) from None
    return load_yaml_text(text, source, limits)
