"""Shared validation helpers for the experiment and cluster config parsers.

Owns: ``Checker`` (collects every ``FieldError`` and warning instead of stopping
at the first), path joining, did-you-mean hints, and the Slurm syntax checks
shared by both configs (``--time`` values, user ``sbatch_args``, signal names).
Must not: know the config schemas, read files, or build model objects.

Convention: every ``Checker`` method takes the raw value and its dotted path and
returns a usable value (the default when the value is missing *or* invalid), so
a parser can keep going and report all problems at once. ``None`` counts as
missing, as in Determined ("null = use the default").
"""

from __future__ import annotations

import difflib
import re
import signal
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeVar

from dethpc.common.errors import ConfigError, FieldError
from dethpc.common.sbatch_options import check_args

T = TypeVar("T")
_REPR_MAX = 80


def join(path: str, key: str | int) -> str:
    """``join("a", "b") == "a.b"``, ``join("a", 0) == "a[0]"``, ``join("", "b") == "b"``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def show(value: Any) -> str:
    """repr of a bad value, shortened so one error stays one line."""
    text = repr(value)
    return text if len(text) <= _REPR_MAX else text[: _REPR_MAX - 3] + "..."


def did_you_mean(word: str, candidates: Collection[str]) -> str:
    """``"did you mean 'x'? "`` for the closest candidate, or ``""``."""
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    if not matches and len(word) >= 4:  # "asha" -> "adaptive_asha"
        matches = [c for c in candidates if word.lower() in c.lower()][:1]
    return f"did you mean {matches[0]!r}? " if matches else ""


def allowed_list(choices: Collection[str]) -> str:
    return ", ".join(repr(c) for c in choices)


def is_int(value: Any) -> bool:
    """True for ints but not bools (YAML ``true`` is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return is_int(value) or isinstance(value, float)


class Checker:
    """Accumulates errors and warnings for one config document."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []
        self.warnings: list[str] = []
        #: valid values dethpc cannot serve: a warning now, a refusal at submit
        self.unsupported: list[FieldError] = []

    # ----------------------------------------------------------------- recording
    def error(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(f"{path}: {message}")

    def unsupported_here(self, path: str, message: str) -> None:
        """A value Determined accepts that dethpc cannot honour on Slurm: validation
        passes with a warning; ``submit`` refuses it (``ExperimentConfig.unsupported``)."""
        self.unsupported.append(FieldError(path, message))
        self.warn(path, f"{message}; `submit` refuses it")

    def raise_if_errors(self, source: str) -> None:
        if self.errors:
            raise ConfigError(self.errors, source)

    # ---------------------------------------------------------------- structure
    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        """A dict (``{}`` when missing); an error and ``{}`` for anything else."""
        if value is None:
            return {}
        if isinstance(value, dict):
            return value
        self.error(path, f"expected a mapping, got {show(value)}")
        return {}

    def keys(
        self,
        data: Mapping[str, Any],
        path: str,
        allowed: Collection[str],
        ignored: Mapping[str, str] | None = None,
    ) -> None:
        """Error on unknown keys (with a did-you-mean); warn on ignored ones."""
        ignored = ignored or {}
        for key in data:
            sub = join(path, str(key))
            if key in allowed:
                continue
            if key in ignored:
                self.warn(sub, ignored[key])
                continue
            hint = did_you_mean(str(key), list(allowed) + list(ignored))
            self.error(sub, f"unknown field {show(key)}; {hint}allowed: {allowed_list(allowed)}")

    def required(self, data: Mapping[str, Any], key: str, path: str, hint: str = "") -> Any:
        value = data.get(key)
        if value is None:
            self.error(join(path, key), "required" + (f"; {hint}" if hint else ""))
        return value

    # ------------------------------------------------------------------ scalars
    def integer(
        self, value: Any, path: str, default: T, minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | T:
        if value is None:
            return default
        ok = is_int(value) and (minimum is None or value >= minimum) and (
            maximum is None or value <= maximum)
        if ok:
            return int(value)
        self.error(path, f"expected {_int_phrase(minimum, maximum)}, got {show(value)}")
        return default

    def number(
        self, value: Any, path: str, default: T, minimum: float | None = None,
        above: float | None = None,
    ) -> float | T:
        """A float or int; ``minimum`` is inclusive, ``above`` exclusive."""
        if value is None:
            return default
        ok = is_number(value) and (minimum is None or value >= minimum) and (
            above is None or value > above)
        if ok:
            return float(value)
        bound = f" >= {minimum}" if minimum is not None else ""
        bound += f" > {above}" if above is not None else ""
        self.error(path, f"expected a number{bound}, got {show(value)}")
        return default

    def boolean(self, value: Any, path: str, default: bool) -> bool:
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        self.error(path, f"expected true or false, got {show(value)}")
        return default

    def string(self, value: Any, path: str, default: T, nonempty: bool = True) -> str | T:
        if value is None:
            return default
        if isinstance(value, str) and (value.strip() or not nonempty):
            return value
        what = "a non-empty string" if nonempty else "a string"
        self.error(path, f"expected {what}, got {show(value)}")
        return default

    def choice(self, value: Any, path: str, choices: Sequence[str], default: T) -> str | T:
        if value is None:
            return default
        if isinstance(value, str) and value in choices:
            return value
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        self.error(path, f"invalid value {show(value)}; {hint}allowed: {allowed_list(choices)}")
        return default

    def string_list(self, value: Any, path: str, nonempty: bool = True) -> tuple[str, ...]:
        """A list of (non-empty, unless ``nonempty`` is False) strings (``()`` when
        missing)."""
        if value is None:
            return ()
        if not isinstance(value, list):
            self.error(path, f"expected a list of strings, got {show(value)}")
            return ()
        out: list[str] = []
        for i, item in enumerate(value):
            text = self.string(item, join(path, i), None, nonempty)
            if text is not None:
                out.append(text)
        return tuple(out)

    def int_list(self, value: Any, path: str, minimum: int | None = None) -> tuple[int, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            self.error(path, f"expected a list of integers, got {show(value)}")
            return ()
        out = [self.integer(item, join(path, i), None, minimum) for i, item in enumerate(value)]
        return tuple(v for v in out if v is not None)


def bounds_phrase(minimum: int | None, maximum: int | None) -> str:
    """`` between a and b``, `` >= a``, `` <= b`` or nothing (for "expected an integer...")."""
    if minimum is not None and maximum is not None:
        return f" between {minimum} and {maximum}"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""


def _int_phrase(minimum: int | None, maximum: int | None) -> str:
    return f"an integer{bounds_phrase(minimum, maximum)}"


# ---------------------------------------------------------------- Slurm syntax
_TIME_FORMS: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in (
    r"^(?P<m>\d+)$",
    r"^(?P<m>\d+):(?P<s>\d+)$",
    r"^(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$",
    r"^(?P<d>\d+)-(?P<h>\d+)$",
    r"^(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+)$",
    r"^(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$",
))
TIME_ALLOWED = ("minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED "
                "(quote it in YAML, e.g. '01:30:00')")


def is_sbatch_time(text: str) -> bool:
    """True when ``text`` is a valid ``sbatch --time`` value."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return True
    for form in _TIME_FORMS:
        match = form.match(text)
        if match is None:
            continue
        parts = match.groupdict()
        if parts.get("d") is not None and parts.get("h") is not None:
            if int(parts["h"]) >= 24:
                return False
        # the leading field may exceed 59 (e.g. 90 minutes, 100:00:00); the others may not
        trailing = [k for k in ("m", "s") if parts.get(k) is not None and k != _lead(parts)]
        return all(int(parts[k]) < 60 for k in trailing)
    return False


def _lead(parts: Mapping[str, str | None]) -> str:
    for key in ("d", "h", "m", "s"):
        if parts.get(key) is not None:
            return key
    return ""


def sbatch_time(ck: Checker, value: Any, path: str) -> str | None:
    """Validate a walltime; an int is read as minutes. Returns the string form."""
    if value is None:
        return None
    if is_int(value) and value > 0:
        return str(value)
    if isinstance(value, str) and is_sbatch_time(value.strip()):
        return value.strip()
    ck.error(path, f"invalid Slurm time {show(value)}; allowed: {TIME_ALLOWED}")
    return None


def sbatch_args(ck: Checker, value: Any, path: str) -> tuple[str, ...]:
    """Site/user sbatch options (``dethpc.common.sbatch_options.check_args``): strings starting
    with '-' that dethpc does not manage, or ``!--option`` to drop one of dethpc's."""
    args = ck.string_list(value, path)
    problems = {p.index: p.message for p in check_args(args)}
    for index, message in problems.items():
        ck.error(join(path, index), message)
    return tuple(a for i, a in enumerate(args) if i not in problems)


_UNTRAPPABLE = ("KILL", "STOP")
SIGNAL_EXAMPLES = "a signal name such as USR1, USR2, TERM, INT, HUP or URG"


def signal_name(ck: Checker, value: Any, path: str, default: str) -> str:
    """A catchable signal name, normalized without the SIG prefix (``SIGUSR1`` -> ``USR1``)."""
    if value is None:
        return default
    if isinstance(value, str):
        name = value.strip().upper()
        name = name[3:] if name.startswith("SIG") else name
        if f"SIG{name}" in signal.Signals.__members__ and name not in _UNTRAPPABLE:
            return name
    ck.error(path, f"invalid signal {show(value)}; expected {SIGNAL_EXAMPLES} "
                   "(KILL and STOP cannot be caught)")
    return default
