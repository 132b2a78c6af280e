"""What the CLI prints with: rich consoles, tables that fit the terminal, prose, JSON.

Owns: ``console``/``err_console``, ``table`` (rich's head, plain rows where rich would
draw them the same, ``plain_rows``), ``say``, ``print_json``, ``fmt_metric`` and
``report_error`` (how an expected failure is said on stderr).
Must not: import typer, the store or the ORM: the read path (``dethpc.surfaces.cli.fastread``)
prints with this module alone, so that it answers in the time Slurm's tools do (issue 47);
nor rich before something is drawn with it: the consoles are made on first use (PEP 562
``__getattr__``), so ``--json`` and ``trial logs`` never import rich (~20 ms under load).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from dethpc.surfaces.layout import GAP, Col, cell_lines, fit, one_line, terminal_width, wrap_words

if TYPE_CHECKING:
    from rich.console import Console

    from dethpc.common.errors import DethpcError

    #: stdout's console
    console: Console
    #: errors are never hard-wrapped: a path or a command to copy from them stays one line
    err_console: Console


def __getattr__(name: str) -> Console:
    """``console`` and ``err_console``, made (and rich imported) on first use."""
    if name not in ("console", "err_console"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    made = Console() if name == "console" else Console(stderr=True, soft_wrap=True)
    globals()[name] = made
    return made


def _console() -> Console:
    """``console`` (a test may have replaced it)."""
    made: Console | None = globals().get("console")
    return made if made is not None else __getattr__("console")


def _err_console() -> Console:
    made: Console | None = globals().get("err_console")
    return made if made is not None else __getattr__("err_console")


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def table(title: str, columns: Sequence[str | Col], rows: Sequence[Sequence[Any]], *,
          wide: bool = False) -> None:
    """Print a table that fits the terminal (``dethpc.surfaces.layout``): shrinkable columns
    cut with ``…``, columns that cannot fit left out with a note; ``wide``: every column
    at full width, whatever the terminal."""
    cols = [c if isinstance(c, Col) else Col(c) for c in columns]
    cells = [[one_line(v) for v in r] for r in rows]
    width = terminal_width()
    layout = fit(cols, cells, None if wide else width)
    headers, shown = cell_lines(cols, cells, layout)
    drawn = max(layout.total, len(title))
    drawn = drawn if wide else min(drawn, width)
    plain = plain_rows(shown, layout.widths) if drawn >= layout.total else None
    head = (plain_head(title, headers, layout.widths)
            if plain is not None and plain_console() else None)
    if head is not None and plain is not None:   # what rich would draw, without rich
        sys.stdout.write(head + plain)
        sys.stdout.flush()
    else:
        file = _rich_table(title, headers, layout.widths,
                           None if plain is not None else shown, drawn)
        if plain:
            file.write(plain)
            file.flush()
    if layout.dropped and rows:  # an empty table hides nothing
        names = ", ".join(cols[i].header for i in layout.dropped)
        note = f"({names} left out to fit {width} columns; --wide shows them)"
        for line in wrap_words(note, width):
            _line(line)


def _rich_table(title: str, headers: Sequence[str], widths: Sequence[int],
                rows: Sequence[Sequence[str]] | None, drawn: int) -> IO[str]:
    """``table``'s head (and ``rows`` unless None: written plain after it) drawn by rich;
    the file it drew on."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = _console()
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              padding=(0, GAP - 1, 0, 0))
    for h, w in zip(headers, widths, strict=True):
        t.add_column(Text(h), width=w, no_wrap=True, overflow="ellipsis")
    for r in rows or ():
        t.add_row(*[Text(v) for v in r])
    # a console as wide as the table: rich never draws wider than its console's width
    out = Console(file=console.file, width=drawn, force_terminal=console.is_terminal or None)
    out.print(t, crop=False)
    return out.file


def plain_rows(rows: Sequence[Sequence[str]], widths: Sequence[int]) -> str | None:
    """The body of ``table``'s rich table as rich draws it (box ``SIMPLE_HEAD`` without
    edges, fixed widths, cells already cut to them: each cell left-justified to its width,
    ``GAP`` spaces between, no style in a terminal either), without rich's cost per cell
    (1,000 rows: about 0.4 s of a 0.7 s ``experiment list`` here, issue 47); the head
    (title, headers, rule) stays rich's. None, for rich to draw the rows, when a cell is not
    plain printable ASCII or the ``…`` of a cut cell (wide or combining characters, which
    rich measures in cells) or is wider than its column (rich would cut it).
    tests/unit/surfaces/test_cli_tables.py compares the two byte for byte."""
    gap = " " * GAP
    lines = []
    for row in rows:
        for v, w in zip(row, widths, strict=True):
            plain = v.replace("\u2026", ".")   # a cut cell's "…": one cell wide in rich
            if len(v) > w or not (plain.isascii() and plain.isprintable()):
                return None
        lines.append(gap.join(v.ljust(w) for v, w in zip(row, widths, strict=True)) + "\n")
    return "".join(lines)


def say(text: str, *, wide: bool = False, hang: int = 0) -> None:
    """A line of prose (no markup), wrapped at spaces to the terminal's width (lines
    after the first indented ``hang`` spaces); a word longer than the width is cut with
    ``…``; ``wide``: one line, nothing cut."""
    if wide:
        _line(text)
        return
    for line in wrap_words(text, terminal_width(), hang):  # already fits: rich must not wrap
        _line(line)


def _line(text: str) -> None:
    """One line of prose on stdout as ``console.print(text, markup=False, highlight=False,
    soft_wrap=True)`` prints it: written plain where that is the same bytes
    (``plain_console``, ``plain_text``), else by rich."""
    if plain_console() and plain_text(text):
        sys.stdout.write(text + "\n")
        return
    _console().print(text, markup=False, highlight=False, soft_wrap=True)


#: what rich's emoji codes (``:smile:``) could match in a line of prose
_EMOJI_LIKE = re.compile(r":\S+:")
#: rich's box-drawing character of ``SIMPLE_HEAD``'s rule under the headers
RULE = "\u2500"


def plain_console() -> bool:
    """True when rich would draw on stdout without any style or terminal control: no
    console made yet (a test's, or one a fallback made, decides from then on), stdout not
    a terminal, and neither of the variables rich reads to think otherwise
    (``TTY_COMPATIBLE``, ``FORCE_COLOR``) set."""
    if "console" in globals() or "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return False
    try:
        return not sys.stdout.isatty()
    except (AttributeError, ValueError):   # closed or replaced: rich decides
        return False


def plain_text(text: str) -> bool:
    """True for prose rich prints as it is with markup and highlighting off: printable
    ASCII (rich strips control codes and measures wide characters) and nothing like an
    emoji code."""
    return text.isascii() and text.isprintable() and not _EMOJI_LIKE.search(text)


def plain_head(title: str, headers: Sequence[str], widths: Sequence[int]) -> str | None:
    """``table``'s head as rich draws it on a console that is not a terminal: the title
    centred over the table, the headers (lines of a wrapped header aligned to the bottom)
    left-justified in their columns ``GAP`` apart, and the rule; None where rich's could
    differ (a title wider than the table, which rich wraps; text that is not plain
    ASCII; a ``[`` in the title, which rich reads as markup).
    tests/unit/surfaces/test_cli_tables.py compares the two byte for byte."""
    total = sum(widths) + GAP * max(len(widths) - 1, 0)
    split = [h.split("\n") for h in headers]
    if (not headers or len(title) > total or not plain_text(title) or "[" in title
            or any(len(line) > w or not plain_text(line)
                   for lines, w in zip(split, widths, strict=True) for line in lines)):
        return None
    excess = total - len(title)
    out = [" " * (excess // 2) + title + " " * (excess - excess // 2)] if title else []
    height = max(len(lines) for lines in split)
    for k in range(height):
        out.append((" " * GAP).join(
            (lines[k - height + len(lines)] if k >= height - len(lines) else "").ljust(w)
            for lines, w in zip(split, widths, strict=True)))
    out.append(RULE * total)
    return "\n".join(out) + "\n"


def report_error(exc: DethpcError) -> None:
    """An expected failure, said on stderr as every command says it (its exit code is
    the caller's: ``exc.exit_code``)."""
    err_console = _err_console()
    err_console.print("[red]error:[/]", end=" ")
    err_console.print(str(exc), markup=False, highlight=False)


def fmt_metric(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"
