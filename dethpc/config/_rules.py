"""A small interpreter for the JSON-schema keywords Determined's expconf schemas use.

Owns: rule objects that mirror those keywords -- ``type`` (``Str``, ``Int``,
``Num``, ``Bool``, ``Null``), ``enum``/``const``, ``items`` (``Arr``),
``properties``/``additionalProperties``/``required`` (``Obj``, ``Map``), Determined's
extensions ``eventuallyRequired`` (``Obj.eventually``, enforced when checking for
completeness), ``disallowProperties`` (``Obj.disallow``), ``checks`` and
``compareProperties`` (``Obj.checks``: plain functions), ``union`` (``Union``: exactly
one item must hold; the error shown is the first item whose key selects it, as
``master/pkg/schemas/extensions/union.go``) and its ``const:name=...`` form
(``Tagged``) -- plus ``Ctx``, which collects errors (dotted path, message) and
records every path a rule checked (``known``: a field Determined defines).
Must not: know Determined's schemas (``dethpc.config.expconf`` declares them) or
read files.

Determined's null rule holds: a property whose value is null counts as absent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dethpc.config._check import bounds_phrase, did_you_mean, is_int, is_number, join, show

#: a custom check on an object: ``(object, its path) -> [(path, message), ...]``
CheckFn = Callable[[Mapping[str, Any], str], list[tuple[str, str]]]


@dataclass
class Ctx:
    """One walk: the errors found, the paths Determined's rules checked, the mode."""

    complete: bool = False          #: also enforce ``eventuallyRequired``
    errors: list[tuple[str, str]] = field(default_factory=list)
    known: set[str] = field(default_factory=set)
    #: subtrees Determined takes as free-form (``data``, hparam values, pod_spec, ...)
    free: set[str] = field(default_factory=set)

    def sub(self) -> Ctx:
        """A scratch context for trying one union item."""
        return Ctx(self.complete, [], self.known, self.free)

    def error(self, path: str, message: str) -> None:
        self.errors.append((path, message))


class Rule:
    """One schema; ``check`` records problems of ``value`` (found at ``path``) in ``cx``."""

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        raise NotImplementedError

    def ok(self, value: Any, path: str, cx: Ctx) -> tuple[bool, list[tuple[str, str]]]:
        scratch = cx.sub()
        self.check(value, path, scratch)
        return not scratch.errors, scratch.errors


class AnyV(Rule):
    """``true``: anything goes (a free-form subtree)."""

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        cx.free.add(path)


@dataclass
class Null(Rule):
    """``{"type": "null"}`` (only null is allowed)."""

    why: str = "must be null"

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        if value is not None:
            cx.error(path, f"{self.why}, got {show(value)}")


@dataclass
class Str(Rule):
    pattern: str | None = None
    #: message when ``pattern`` does not match (Determined's ``checks`` text)
    why: str | None = None
    #: values a ``not: {const: ...}`` check forbids, with the check's text
    forbid: Mapping[str, str] = field(default_factory=dict)

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        if not isinstance(value, str):
            cx.error(path, f"expected a string, got {show(value)}")
            return
        if value in self.forbid:
            cx.error(path, self.forbid[value])
        if self.pattern is not None and not re.search(self.pattern, value):
            cx.error(path, f"{self.why or 'does not match ' + self.pattern}, got {show(value)}")


@dataclass
class Int(Rule):
    minimum: int | None = None
    maximum: int | None = None

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        if not is_int(value):
            cx.error(path, f"expected an integer{bounds_phrase(self.minimum, self.maximum)}, "
                           f"got {show(value)}")
        elif (self.minimum is not None and value < self.minimum) or (
                self.maximum is not None and value > self.maximum):
            cx.error(path, f"expected an integer{bounds_phrase(self.minimum, self.maximum)}, "
                           f"got {show(value)}")


@dataclass
class Num(Rule):
    minimum: float | None = None
    above: float | None = None      #: ``exclusiveMinimum``

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        bad = not is_number(value) or (self.minimum is not None and value < self.minimum) or (
            self.above is not None and value <= self.above)
        if bad:
            bound = f" >= {self.minimum}" if self.minimum is not None else ""
            bound += f" > {self.above}" if self.above is not None else ""
            cx.error(path, f"expected a number{bound}, got {show(value)}")


class Bool(Rule):
    def check(self, value: Any, path: str, cx: Ctx) -> None:
        if not isinstance(value, bool):
            cx.error(path, f"expected true or false, got {show(value)}")


@dataclass
class Enum(Rule):
    values: tuple[str, ...]

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        if not isinstance(value, str) or value not in self.values:
            hint = did_you_mean(value, self.values) if isinstance(value, str) else ""
            cx.error(path, f"invalid value {show(value)}; {hint}allowed: "
                           + ", ".join(repr(v) for v in self.values))


@dataclass
class Arr(Rule):
    items: Rule

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        if not isinstance(value, list):
            cx.error(path, f"expected a list, got {show(value)}")
            return
        for index, item in enumerate(value):
            cx.known.add(join(path, index))
            self.items.check(item, join(path, index), cx)


@dataclass
class Map(Rule):
    """An object whose every value follows ``values`` (``additionalProperties``)."""

    values: Rule

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        if not isinstance(value, dict):
            cx.error(path, f"expected a mapping, got {show(value)}")
            return
        for key, item in value.items():
            self.values.check(item, join(path, str(key)), cx)


@dataclass
class Obj(Rule):
    """``type: object`` with ``properties``; unknown keys are errors unless ``extra``
    (a rule for them) or ``ext`` (dethpc's own keys, checked by dethpc's parser)."""

    props: Mapping[str, Rule]
    required: tuple[str, ...] = ()
    eventually: tuple[str, ...] = ()
    extra: Rule | None = None
    disallow: Mapping[str, str] = field(default_factory=dict)
    checks: tuple[CheckFn, ...] = ()
    ext: Callable[[], Iterable[str]] | None = None

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        if not isinstance(value, dict):
            cx.error(path, f"expected a mapping, got {show(value)}")
            return
        mine = set(self.ext()) if self.ext is not None else set()
        for key, item in value.items():
            sub = join(path, str(key))
            if key in self.disallow and item is not None:
                cx.error(sub, self.disallow[key])
            elif key in self.props:
                cx.known.add(sub)
                if item is not None:
                    self.props[key].check(item, sub, cx)
            elif self.extra is not None:
                cx.known.add(sub)
                self.extra.check(item, sub, cx)
            elif key not in mine:
                allowed = sorted(self.props) + sorted(mine)
                cx.error(sub, f"unknown field {show(key)}; {did_you_mean(str(key), allowed)}"
                              "allowed: " + ", ".join(repr(k) for k in allowed))
        needed = self.required + (self.eventually if cx.complete else ())
        for key in needed:
            if value.get(key) is None:
                cx.error(join(path, key), "required")
        for fn in self.checks:
            for where, message in fn(value, path):
                cx.error(where, message)


@dataclass
class Union(Rule):
    """Determined's ``union``: exactly one item must hold. On failure the message is
    ``message`` plus the errors of the first item whose ``selects`` is true."""

    items: Sequence[tuple[Callable[[Any], bool], Rule]]
    message: str = "union failed to validate"

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        chosen: list[tuple[str, str]] | None = None
        valid = 0
        for selects, rule in self.items:
            good, errors = rule.ok(value, path, cx)
            valid += good
            if not good and chosen is None and selects(value):
                chosen = errors
        if valid == 1:
            return
        if chosen:
            cx.errors.extend(chosen)
        else:
            cx.error(path, f"{self.message}, got {show(value)}")


@dataclass
class Tagged(Rule):
    """A union keyed by ``const:<key>=<value>`` items (searchers, storage, hparams):
    the item named by ``value[key]`` decides; an unknown name is an error at
    ``<path>.<key>`` unless ``foreign`` (names dethpc validates itself) lists it."""

    key: str
    variants: Mapping[str, Rule]
    base: Rule | None = None        #: checked when the key is absent
    foreign: Callable[[], Iterable[str]] | None = None

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        if not isinstance(value, dict):
            cx.error(path, f"expected a mapping, got {show(value)}")
            return
        tag = value.get(self.key)
        if tag is None:
            if self.base is not None:
                self.base.check(value, path, cx)
            return
        rule = self.variants.get(tag) if isinstance(tag, str) else None
        if rule is not None:
            rule.check(value, path, cx)
            return
        if self.foreign is not None and isinstance(tag, str) and tag in set(self.foreign()):
            cx.known.add(path)
            return
        Enum(tuple(self.variants)).check(tag, join(path, self.key), cx)


@dataclass
class Lazy(Rule):
    """A recursive reference (``$ref`` to a schema being defined)."""

    make: Callable[[], Rule]

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        self.make().check(value, path, cx)


@dataclass
class All(Rule):
    rules: tuple[Rule, ...]

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        for rule in self.rules:
            rule.check(value, path, cx)


# ---------------------------------------------------------------- union keys
def always(_: Any) -> bool:
    return True


def never(_: Any) -> bool:
    return False


def is_type(kind: type) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, kind)


