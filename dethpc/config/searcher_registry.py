"""The searcher registry: each searcher is one module that declares one ``SearcherSpec``.

Owns: ``SearcherSpec`` (a searcher's name, the config keys it owns with their
defaults and parsers, its ``max_trials`` rule, its cross-key checks, whose length a
trial trains to and the factory that builds it), ``Option`` and its builders (``int_option``,
``enum_option``, ``int_list_option``), ``COMMON_KEYS`` (the keys every searcher
shares, parsed by ``dethpc.config.searcher``), and the registry itself:
``BUILTIN_MODULES`` (one line per built-in searcher) plus ``register`` /
``unregister`` for searchers added at run time.
Must not: parse a whole ``searcher`` section (``dethpc.config.searcher`` does, by
asking this module for names, keys and per-searcher validation) or make search
decisions (the searcher classes do).

Adding a searcher: write ``dethpc/searchers/<module>.py`` with the ``Searcher``
subclass and ``SPEC = SearcherSpec(...)``, then add the module to
``BUILTIN_MODULES`` (docs/searchers.md, "Adding a searcher").

Imports: this module is the seam between the config layer and ``dethpc.searchers``
above it: the config checker asks it for names and keys, and the searcher modules
declare their ``SPEC`` with its builders. The built-in modules load by name on the
first lookup (``importlib``), never through an import statement, so the config layer
imports nothing above it; they import ``dethpc.config.model``, whose package imports
``dethpc.config.searcher``, which imports this module. Nothing here imports torch or
does I/O.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from dethpc.config._check import Checker, join

if TYPE_CHECKING:
    from dethpc.config.model import HParamTree, SearcherConfig

#: keys every searcher accepts; ``dethpc.config.searcher`` parses them itself
COMMON_KEYS = ("name", "metric", "smaller_is_better", "max_length", "time_metric", "max_time",
               "max_trials", "max_concurrent_trials", "stop_grace_s")
#: the built-in searchers, in the order error messages list them; each module has ``SPEC``
BUILTIN_MODULES = (
    "dethpc.searchers.single",
    "dethpc.searchers.random_search",
    "dethpc.searchers.grid",
    "dethpc.searchers.asha",
)
#: names an option may not take (common keys, and ``SearcherConfig.options`` itself)
_RESERVED = (*COMMON_KEYS, "options")

E = TypeVar("E", bound=StrEnum)
#: ``(checker, raw value or None when missing, dotted path) -> value``
Parse = Callable[[Checker, Any, str], Any]
#: ``(checker, raw max_trials or None, dotted path, hparams) -> max_trials``
MaxTrialsRule = Callable[[Checker, Any, str, "HParamTree"], int]
#: ``(checker, searcher mapping, its path, hparams)``: records problems across keys
Check = Callable[[Checker, Mapping[str, Any], str, "HParamTree"], None]
#: builds the searcher (a ``Searcher`` subclass is one): ``(config, hparams, seed)``;
#: typed ``Any`` here because the config layer never imports ``dethpc.searchers``
#: (``dethpc.searchers.factory.make_searcher`` gives the result its type)
Factory = Callable[["SearcherConfig", "HParamTree", int], Any]


@dataclass(frozen=True)
class Option:
    """One config key a searcher owns (Determined's name), its default and its parser.

    ``parse`` returns the default when the value is missing or invalid and records
    the problem (field path, bad value, allowed values) in the checker.
    """

    key: str
    default: Any
    parse: Parse
    #: the allowed values when the key is a choice (``mode``, ``variant``)
    enum: type[StrEnum] | None = None


def int_option(key: str, default: int, minimum: int | None = None) -> Option:
    """An integer key, ``>= minimum`` when given."""
    def parse(ck: Checker, value: Any, path: str) -> int:
        return int(ck.integer(value, path, default, minimum=minimum))
    return Option(key, default, parse)


def int_list_option(key: str, minimum: int | None = None) -> Option:
    """A list of integers (default: empty), each ``>= minimum`` when given."""
    def parse(ck: Checker, value: Any, path: str) -> tuple[int, ...]:
        return ck.int_list(value, path, minimum=minimum)
    return Option(key, (), parse)


def enum_option(key: str, enum: type[E], default: E) -> Option:
    """One of ``enum``'s values; the parsed value is the enum member."""
    choices = tuple(member.value for member in enum)

    def parse(ck: Checker, value: Any, path: str) -> E:
        return enum(ck.choice(value, path, choices, default.value))
    return Option(key, default, parse, enum=enum)


@dataclass(frozen=True)
class SearcherSpec:
    """Everything dethpc knows about one searcher, declared once in its module."""

    #: ``searcher.name`` (also the searcher class's ``name``, stored in its snapshots)
    name: str
    factory: Factory
    #: the keys this searcher owns beyond ``COMMON_KEYS``; another searcher may own
    #: the same key (the first registered owner's parser checks it where it is ignored)
    options: tuple[Option, ...] = ()
    #: how ``max_trials`` is derived; None = required, an integer >= 1
    max_trials: MaxTrialsRule | None = None
    #: checks across keys or against the hyperparameters (e.g. grid's counts)
    check: Check | None = None
    #: Determined 0.38's length rule for a searcher that stops no trial short: a trial's
    #: own ``Trainer.fit(max_length=...)`` decides its length, longer or shorter, and the
    #: ``Create``'s length (``searcher.max_length``, Determined's legacy field) is only the
    #: length of a ``fit`` without one (single, random, grid). False: the length is where
    #: the searcher ranks the trial (an ASHA rung) and the Trainer stops there when
    #: ``fit``'s is longer -- also for a searcher added at run time that does not say
    #: (written into ``target.json``: ``dethpc.searchers.base.target_document``)
    fit_length_wins: bool = False

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"a searcher needs a non-empty string name, got {self.name!r}")
        keys = [o.key for o in self.options]
        if len(set(keys)) != len(keys):
            raise ValueError(f"searcher {self.name!r} declares an option twice: {keys}")
        clash = [k for k in keys if k in _RESERVED]
        if clash:
            raise ValueError(f"searcher {self.name!r}: option(s) {clash} are reserved "
                             f"(common keys: {', '.join(_RESERVED)})")

    @property
    def keys(self) -> tuple[str, ...]:
        """The config keys this searcher owns, in declaration order."""
        return tuple(o.key for o in self.options)

    @property
    def defaults(self) -> dict[str, Any]:
        return {o.key: o.default for o in self.options}

    def validate(self, ck: Checker, data: Mapping[str, Any], path: str,
                 hparams: HParamTree) -> dict[str, Any]:
        """Check this searcher's keys and ``max_trials`` in ``data`` (the mapping at
        ``path``); their values by key, defaults filled in. Problems go to ``ck``."""
        if self.check is not None:
            self.check(ck, data, path, hparams)
        values = {o.key: o.parse(ck, data.get(o.key), join(path, o.key)) for o in self.options}
        rule = self.max_trials or self._required_max_trials
        values["max_trials"] = rule(ck, data.get("max_trials"), join(path, "max_trials"),
                                    hparams)
        return values

    def _required_max_trials(self, ck: Checker, value: Any, path: str,
                             hparams: HParamTree) -> int:
        if value is None:
            ck.error(path, f"required by the {self.name} searcher; expected an integer >= 1")
            return 1
        return int(ck.integer(value, path, 1, minimum=1))


# ====================================================================== registry
_lock = threading.RLock()
_specs: dict[str, SearcherSpec] = {}
_loaded = False


def _table() -> dict[str, SearcherSpec]:
    global _loaded
    with _lock:
        if not _loaded:
            builtin: dict[str, SearcherSpec] = {}
            for module in BUILTIN_MODULES:
                spec = getattr(importlib.import_module(module), "SPEC", None)
                if not isinstance(spec, SearcherSpec):
                    raise TypeError(f"{module} declares no `SPEC = SearcherSpec(...)`")
                _put(builtin, spec)
            added = dict(_specs)
            _specs.clear()
            _specs.update(builtin)
            for spec in added.values():
                _put(_specs, spec)
            _loaded = True
        return _specs


def _put(table: dict[str, SearcherSpec], spec: SearcherSpec) -> None:
    if spec.name in table:
        raise ValueError(f"a searcher named {spec.name!r} is already registered")
    table[spec.name] = spec


def register(spec: SearcherSpec) -> SearcherSpec:
    """Add a searcher at run time (a plugin, a test); ``ValueError`` if the name is taken."""
    with _lock:
        _put(_table(), spec)
    return spec


def unregister(name: str) -> None:
    """Remove a searcher added with ``register`` (``KeyError`` if unknown)."""
    with _lock:
        del _table()[name]


def find(name: str) -> SearcherSpec | None:
    """The spec named ``name``, or None."""
    return _table().get(name)


def get(name: str) -> SearcherSpec:
    """The spec named ``name``; ``KeyError`` listing the allowed names otherwise."""
    spec = find(name)
    if spec is None:
        raise KeyError(f"unknown searcher {name!r}; allowed: {', '.join(names())}")
    return spec


def specs() -> tuple[SearcherSpec, ...]:
    return tuple(_table().values())


def names() -> tuple[str, ...]:
    """Registered searcher names: built-ins in ``BUILTIN_MODULES`` order, then added ones."""
    return tuple(_table())


def option_keys() -> tuple[str, ...]:
    """Every key some searcher owns, in registration order, without repeats."""
    return tuple(dict.fromkeys(k for s in specs() for k in s.keys))


def owners(key: str) -> tuple[SearcherSpec, ...]:
    """The searchers that own ``key``."""
    return tuple(s for s in specs() if key in s.keys)
