"""Fitting tables and lines into the terminal's width, never splitting a word.

Owns: the pure logic behind every table the CLI prints: each column's width
(``fit``), a cell cut to its width with an ellipsis (``truncate``), a header wrapped
at its spaces (``wrap_words``), hyperparameters flattened (``flat_hparams``) and
shown as their own columns or as one compact ``k=v`` cell (``kv_text``), the
terminal's width (``terminal_width``).
Must not: print, or know rich; the rendering is ``dethpc.surfaces.cli.common.table``.

The rules (docs/cli.md): a column is *fixed* (ids, numbers, states: never cut) or
*shrinkable* (names, paths, uuids, hyperparameters: cut with ``…`` down to its
``min_width``); a header wraps only at its spaces, so no column is narrower than its
longest header word; columns empty in every row are left out; when even the
narrowest widths do not fit, the columns of lowest ``keep`` go first and the caller
says which (``--wide`` shows them).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ELLIPSIS = "…"
#: spaces between two columns (the table's separator and padding together)
GAP = 2


@dataclass(frozen=True)
class Col:
    """One column: its header, whether its cells may be cut, how narrow it may get,
    and how much it is worth keeping when columns must go (higher stays longer)."""

    header: str
    shrink: bool = False
    min_width: int = 8
    keep: int = 50


@dataclass(frozen=True)
class Layout:
    """Which columns are shown (indices into the given columns) and their widths."""

    shown: tuple[int, ...]
    widths: tuple[int, ...]
    dropped: tuple[int, ...] = ()

    @property
    def total(self) -> int:
        return sum(self.widths) + GAP * max(len(self.widths) - 1, 0)


def terminal_width() -> int:
    """``COLUMNS`` when set, else the terminal's width; 80 when stdout is not a terminal
    (a file, a pipe)."""
    return max(_columns(), 20)


def _columns(fallback: int = 80) -> int:
    """``shutil.get_terminal_size(fallback=(80, 24)).columns`` without importing shutil
    (with bz2, lzma and fnmatch: ~4 ms of a read command's 0.1 s of CPU, issue 47): a
    positive ``COLUMNS``, else the width of the terminal ``sys.__stdout__`` is, else
    ``fallback``. tests/unit/surfaces/test_cli_layout.py holds the two equal."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        size = os.get_terminal_size(sys.__stdout__.fileno())  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return fallback
    return size.columns or fallback


def truncate(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the last one ``…`` when anything was cut."""
    if len(text) <= width:
        return text
    if width <= 0:
        return ""
    return text[:width - 1] + ELLIPSIS


def wrap_words(text: str, width: int, hang: int = 0) -> list[str]:
    """``text`` wrapped at spaces into lines of at most ``width``, every line after the
    first indented by ``hang`` spaces; a word longer than a line is cut with ``…``
    (never split across lines)."""
    lines: list[str] = []
    current = ""
    pad = " " * min(hang, max(width - 8, 0))
    for word in text.split():
        if current and len(current) + 1 + len(word) <= width:
            current += " " + word
            continue
        if current:
            lines.append(current)
        prefix = pad if lines else ""
        current = prefix + truncate(word, width - len(prefix))
    if current or not lines:
        lines.append(current)
    return lines


def longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def _widths(cols: Sequence[Col], cells: Sequence[Sequence[str]]) -> tuple[list[int], list[int]]:
    """(natural, floor) width per column: natural shows everything on one header line;
    floor is the narrowest allowed."""
    natural, floor = [], []
    for i, c in enumerate(cols):
        longest = max((len(r[i]) for r in cells), default=0)
        natural.append(max(len(c.header), longest, 1))
        least = min(c.min_width, longest) if c.shrink else longest
        floor.append(max(longest_word(c.header), least, 1))
    return natural, floor


def fit(cols: Sequence[Col], cells: Sequence[Sequence[str]], width: int | None) -> Layout:
    """Each shown column's width so the table (columns ``GAP`` apart) is at most
    ``width`` wide; ``None``: no limit (``--wide``), every column at its natural width.

    Extra room beyond the floors goes first to the shrinkable columns, one character
    at a time to the narrowest still cut (so a long column cannot starve a short one),
    then to headers that would otherwise wrap."""
    idx = list(range(len(cols)))
    if width is None:
        natural, _ = _widths(cols, cells)
        return Layout(tuple(idx), tuple(natural))
    if cells:  # a column empty in every row says nothing
        idx = [i for i in idx if any(r[i] for r in cells)]
    dropped: list[int] = []
    while True:
        sub_cols = [cols[i] for i in idx]
        sub_cells = [[r[i] for i in idx] for r in cells]
        natural, floor = _widths(sub_cols, sub_cells)
        room = width - GAP * max(len(idx) - 1, 0)
        if sum(natural) <= room:
            return Layout(tuple(idx), tuple(natural), tuple(sorted(dropped)))
        if sum(floor) <= room or len(idx) <= 1:
            break
        # the least worth keeping goes first; of equals, the rightmost
        worst = min(range(len(idx)), key=lambda k: (sub_cols[k].keep, -k))
        dropped.append(idx.pop(worst))
    if sum(floor) > room:  # a single column wider than the terminal: cut it
        return Layout(tuple(idx), (max(room, 1),), tuple(sorted(dropped)))
    widths = list(floor)
    extra = room - sum(widths)
    for shrinkable in (True, False):
        while extra > 0:
            short = [k for k in range(len(idx))
                     if sub_cols[k].shrink == shrinkable and widths[k] < natural[k]]
            if not short:
                break
            k = min(short, key=lambda k: (widths[k], k))
            widths[k] += 1
            extra -= 1
    return Layout(tuple(idx), tuple(widths), tuple(sorted(dropped)))


def cell_lines(cols: Sequence[Col], cells: Sequence[Sequence[str]], layout: Layout
               ) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the shown columns, headers wrapped at spaces (lines joined
    by newlines) and cells cut to their widths."""
    headers = ["\n".join(wrap_words(cols[i].header, w))
               for i, w in zip(layout.shown, layout.widths, strict=True)]
    rows = [[truncate(r[i], w) for i, w in zip(layout.shown, layout.widths, strict=True)]
            for r in cells]
    return headers, rows


def one_line(value: Any) -> str:
    """A cell's text: None is empty; whitespace runs (newlines too) become one space."""
    return "" if value is None else " ".join(str(value).split())


def fmt_value(value: Any) -> str:
    """A hyperparameter's value, compact: floats to 4 significant digits, lists and
    dicts as compact JSON, strings as they are."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return f"{value:.4g}"
        return str(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def flat_hparams(hparams: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested hyperparameters as dotted keys: ``{"model": {"width": 8}}`` ->
    ``{"model.width": 8}``."""
    out: dict[str, Any] = {}
    for k, v in hparams.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flat_hparams(v, key + "."))
        else:
            out[key] = v
    return out


def kv_text(values: Mapping[str, Any]) -> str:
    """``k=v k=v``: the compact one-cell form of hyperparameters (or metrics)."""
    return " ".join(f"{k}={fmt_value(v)}" for k, v in flat_hparams(values).items())
