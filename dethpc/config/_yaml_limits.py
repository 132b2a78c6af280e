"""The bounds a YAML document read from a user must keep, checked before it is built.

Owns: ``YamlLimits`` (the bounds), ``USER_LIMITS`` / ``STORED_LIMITS`` (the two sets in
use, docs/config.md "YAML limits"), ``BoundedLoading`` (a loader mix-in that counts
aliases and nesting while the document is scanned and composed) and ``check_graph`` (the expanded
size, depth and cycles of a composed node graph, measured without expanding it).
Must not: construct Python objects, validate configs, or read files.

Why: a YAML alias (``*name``) repeats an anchored node without repeating its text, so
nine lines of ``[*a, *a, ...]`` stand for nine billion strings ("billion laughs"; merge
keys ``<<`` multiply the same way). PyYAML builds such a document cheaply as shared
objects, but whatever walks it afterwards (validation, JSON, dumping, the daemon's
re-read) pays for every repetition: 8 levels of 9 aliases cost ``dethpc render`` 7-10 s
and 650-830 MB. The checks here run on the composed node graph, once per node, so a
refusal costs milliseconds whatever the document would have expanded to; recursive
anchors (an alias inside the node it names) and nesting deep enough to exhaust
Python's stack are refused the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

#: the docs' section that states the bounds (every refusal names it)
DOCS = "docs/config.md, section 'YAML limits'"


class YamlLimitError(yaml.YAMLError):
    """A document over one of the bounds; its message says which, where and what to do."""


@dataclass(frozen=True)
class YamlLimits:
    """Bounds on one YAML document. ``None`` leaves a bound off."""

    #: characters of YAML text (PyYAML's pure-Python reader parses ~0.1-0.2 MB/s here)
    max_chars: int | None
    #: alias uses (``*name``, each ``<<: *name`` included)
    max_aliases: int | None
    #: nesting of collections, counted as if every alias were written out
    max_depth: int
    #: nodes plus scalar characters, counted as if every alias were written out
    max_expanded: int


#: what dethpc reads from users: experiment configs, search and task files, cluster
#: configs, ``--config`` values. 256 KiB is ~30x the largest config in this repository
#: (Determined's test cases, 9 KB) and still parses in 1-3 s here (a plain 1 MiB
#: document took 8.6 s, bench/yaml_limits); a document without aliases reaches at most
#: ~1.5 expanded units per character, so only aliases can pass the expansion bound.
USER_LIMITS = YamlLimits(max_chars=256 << 10, max_aliases=100, max_depth=100,
                         max_expanded=1_000_000)

#: a config the store holds (``dump_config`` of an accepted one, overrides and defaults
#: added): the same kind of bounds with room for what submission added; the aliases
#: ``dump_config`` writes for parts the document shared count only towards the expansion
STORED_LIMITS = YamlLimits(max_chars=None, max_aliases=None, max_depth=200,
                           max_expanded=4_000_000)


def _where(node: yaml.Node | None) -> str:
    mark = getattr(node, "start_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


class BoundedLoading:
    """Mix-in for a PyYAML loader (before the loader in the bases): composing refuses
    the alias past ``max_aliases`` and the collection past ``max_depth`` as they are
    met, before the rest of the document is read."""

    limits: YamlLimits = USER_LIMITS
    _aliases = 0
    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        loader: Any = self
        if loader.check_event(yaml.AliasEvent):
            self._aliases += 1
            cap = self.limits.max_aliases
            if cap is not None and self._aliases > cap:
                event = loader.peek_event()
                raise YamlLimitError(
                    f"more than {cap} aliases (*name){_where(event)}: a document "
                    f"may use at most {cap} (an alias bomb repeats a part billions "
                    f"of times); write the repeated parts out, or use fewer anchors "
                    f"({DOCS})")
            node: yaml.Node = super().compose_node(parent, index)  # type: ignore[misc]
            return node
        self._depth += 1
        try:
            if self._depth > self.limits.max_depth:
                raise YamlLimitError(_too_deep(self.limits.max_depth,
                                               _where(loader.peek_event())))
            node = super().compose_node(parent, index)  # type: ignore[misc]
            return node
        finally:
            self._depth -= 1


    def fetch_flow_collection_start(self, token_class: Any) -> None:
        """The scanner's ``[``/``{``: refused past ``max_depth`` open ones, before it
        reads ahead (PyYAML looks up to 1,024 characters ahead for a simple key at
        every open level: deep flow nesting cost it 0.5 s before the composer saw it)."""
        loader: Any = self
        if loader.flow_level >= self.limits.max_depth:
            mark = loader.get_mark()
            raise YamlLimitError(_too_deep(
                self.limits.max_depth, f" at line {mark.line + 1}, column {mark.column + 1}"))
        super().fetch_flow_collection_start(token_class)  # type: ignore[misc]

    def get_single_data(self) -> Any:
        """The document's one node, checked by ``check_graph``, then constructed."""
        loader: Any = self
        node = loader.get_single_node()
        if node is None:
            return None
        check_graph(node, self.limits)
        return loader.construct_document(node)


def _too_deep(cap: int, where: str) -> str:
    return (f"nested more than {cap} levels deep{where} (an alias counts as its "
            f"part written out); "
            f"flatten the structure ({DOCS})")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def check_graph(root: yaml.Node, limits: YamlLimits) -> None:
    """Refuse ``root`` if, with every alias and merge written out, it would hold more
    than ``limits.max_expanded`` units (a node is 1, a scalar adds its length), nest
    deeper than ``limits.max_depth``, or contain itself. Each distinct node is visited
    once (its size and depth remembered), without recursion."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_nodes.discard(key)
            kids = _children(node)
            units = 1 + sum(size[id(k)] for k in kids)
            if isinstance(node, yaml.ScalarNode):
                units += len(node.value)
            levels = 1 + max((depth[id(k)] for k in kids), default=0)
            if units > limits.max_expanded:
                raise YamlLimitError(
                    f"the part{_where(node)} would expand to more than "
                    f"{limits.max_expanded:,} nodes and characters once its aliases "
                    f"(*name) and merge keys (<<) are written out (an alias bomb?); "
                    f"write the repeated parts out, or move bulk data into a file of "
                    f"the model directory ({DOCS})")
            if levels > limits.max_depth:
                raise YamlLimitError(_too_deep(limits.max_depth, _where(node)))
            size[key], depth[key] = units, levels
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise YamlLimitError(
                f"an alias refers to a node that contains it{_where(node)} (a "
                f"recursive structure, which a config cannot hold); write the "
                f"part out ({DOCS})")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in reversed(_children(node))
                     if id(kid) not in size)
