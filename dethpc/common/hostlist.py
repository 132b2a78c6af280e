"""Slurm hostlist expressions: expand ``n[1-3,7]`` to names and compress names back.

Owns: ``expand_hostlist`` and ``compress_hostlist``. Pure string functions: the
syntax is Slurm's (comma-separated items, each item any number of bracket
groups ``prefix[ranges]suffix[ranges]...``, ranges ``lo-hi`` or single numbers,
zero padding taken from the width of ``lo``). Only when a spec cannot be parsed
and the caller hands a ``CommandRunner`` do we ask Slurm itself
(``scontrol show hostnames``).
Must not: run a command unless the caller passes a runner; know about jobs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from dethpc.common.errors import CommandError, DethpcError
from dethpc.common.runner import CommandRunner

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")
#: refuse to expand absurd ranges (a typo like n[1-1000000000] must not eat memory)
MAX_HOSTS = 1_000_000


class HostlistSyntaxError(DethpcError, ValueError):
    """A hostlist expression is malformed (also a ``ValueError`` for callers)."""


def expand_hostlist(spec: str, runner: CommandRunner | None = None) -> list[str]:
    """Expand a Slurm hostlist expression into host names, in Slurm's order.

    ``"n[1-3,7]"`` -> ``["n1", "n2", "n3", "n7"]``; ``"gpu-[01-02]"`` keeps the
    padding; ``"a[1-2]b[3-4]"`` -> ``a1b3 a1b4 a2b3 a2b4``; ``""`` -> ``[]``.
    Duplicates are kept (Slurm keeps them too). When ``spec`` cannot be parsed
    and ``runner`` is given, ``scontrol show hostnames <spec>`` decides;
    otherwise ``HostlistSyntaxError`` says where the spec is broken.
    """
    try:
        return _expand(spec)
    except HostlistSyntaxError:
        if runner is None:
            raise
        return _expand_with_scontrol(spec, runner)


def compress_hostlist(hosts: Iterable[str]) -> str:
    """Compress host names into a hostlist expression, keeping their order.

    Adjacent names that share a prefix and numeric width merge into one bracket
    group: ``["n1", "n2", "n3", "n7", "gpu-01"]`` -> ``"n[1-3,7],gpu-01"``.
    The order is kept (it is the rank order), so
    ``expand_hostlist(compress_hostlist(x)) == x`` for every list of names.
    """
    groups: list[tuple[str, list[tuple[int, int, int]]]] = []  # prefix, [(lo, hi, width)]
    out: list[str] = []
    for host in hosts:
        match = _TRAILING_NUMBER.match(host)
        if match is None or "[" in host or "," in host:
            groups.append((host, []))
            continue
        prefix, digits = match.group(1), match.group(2)
        value = int(digits)
        if groups and groups[-1][1] and groups[-1][0] == prefix:
            ranges = groups[-1][1]
            lo, hi, width = ranges[-1]
            if value == hi + 1 and str(value).zfill(width) == digits:
                ranges[-1] = (lo, value, width)
                continue
            if value > hi:
                ranges.append((value, value, len(digits)))
                continue
        groups.append((prefix, [(value, value, len(digits))]))
    for prefix, ranges in groups:
        out.append(_render_group(prefix, ranges))
    return ",".join(out)


# ----------------------------------------------------------------------- parsing
def _expand(spec: str) -> list[str]:
    spec = spec.strip()
    if not spec:
        return []
    hosts: list[str] = []
    for item in _split_top_level(spec):
        if not item:
            raise HostlistSyntaxError(f"hostlist {spec!r} has an empty item (stray comma)")
        hosts.extend(_expand_item(item, spec))
        if len(hosts) > MAX_HOSTS:
            raise HostlistSyntaxError(f"hostlist {spec!r} expands to more than {MAX_HOSTS} hosts")
    return hosts


def _split_top_level(spec: str) -> list[str]:
    """Split on commas that are outside brackets."""
    items: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(spec):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistSyntaxError(f"hostlist {spec!r} nests brackets at offset {i}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistSyntaxError(f"hostlist {spec!r} has an unmatched ']' at offset {i}")
        elif ch == "," and depth == 0:
            items.append(spec[start:i].strip())
            start = i + 1
    if depth != 0:
        raise HostlistSyntaxError(f"hostlist {spec!r} has an unclosed '['")
    items.append(spec[start:].strip())
    return items


def _expand_item(item: str, spec: str) -> list[str]:
    """Expand one item with any number of bracket groups (cartesian product)."""
    open_at = item.find("[")
    if open_at < 0:
        if "]" in item:
            raise HostlistSyntaxError(f"hostlist {spec!r}: unmatched ']' in {item!r}")
        return [item]
    close_at = item.index("]", open_at)
    prefix, body, rest = item[:open_at], item[open_at + 1 : close_at], item[close_at + 1 :]
    tails = _expand_item(rest, spec) if rest else [""]
    return [prefix + value + tail for value in _expand_ranges(body, spec) for tail in tails]


def _expand_ranges(body: str, spec: str) -> list[str]:
    values: list[str] = []
    for part in body.split(","):
        match = _RANGE.match(part.strip())
        if match is None:
            raise HostlistSyntaxError(
                f"hostlist {spec!r}: {part!r} is not a number or a range lo-hi"
            )
        lo_text, hi_text = match.group(1), match.group(2) or match.group(1)
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise HostlistSyntaxError(f"hostlist {spec!r}: range {part!r} runs backwards")
        if hi - lo + 1 > MAX_HOSTS:
            raise HostlistSyntaxError(f"hostlist {spec!r}: range {part!r} is too large")
        width = len(lo_text)
        values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return values


def _expand_with_scontrol(spec: str, runner: CommandRunner) -> list[str]:
    try:
        result = runner.run(["scontrol", "show", "hostnames", spec])
    except CommandError as exc:
        raise HostlistSyntaxError(
            f"hostlist {spec!r} is malformed and `scontrol show hostnames` refused it too: {exc}"
        ) from exc
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


# ------------------------------------------------------------------- compressing
def _render_group(prefix: str, ranges: list[tuple[int, int, int]]) -> str:
    if not ranges:
        return prefix
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        lo, _, width = ranges[0]
        return f"{prefix}{str(lo).zfill(width)}"
    parts = []
    for lo, hi, width in ranges:
        text = str(lo).zfill(width)
        parts.append(text if lo == hi else f"{text}-{str(hi).zfill(width)}")
    return f"{prefix}[{','.join(parts)}]"
