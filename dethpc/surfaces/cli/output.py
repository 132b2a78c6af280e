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
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = _console()
    cols = [c if isinstance(c, Col) else Col(c) for c in columns]
    cells = [[one_line(v) for v in r] for r in rows]
    width = terminal_width()
    layout = fit(cols, cells, None if wide else width)
    headers, shown = cell_lines(cols, cells, layout)
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              padding=(0, GAP - 1, 0, 0))
    for h, w in zip(headers, layout.widths, strict=True):
        t.add_column(Text(h), width=w, no_wrap=True, overflow="ellipsis")
    # a console as wide as the table: rich never draws wider than its console's width
    drawn = max(layout.total, len(title))
    drawn = drawn if wide else min(drawn, width)
    plain = plain_rows(shown, layout.widths) if drawn >= layout.total else None
    for r in shown if plain is None else ():
        t.add_row(*[Text(v) for v in r])
    out = Console(file=console.file, width=drawn, force_terminal=console.is_terminal or None)
    out.print(t, crop=False)
    if plain:
        out.file.write(plain)
        out.file.flush()
    if layout.dropped and rows:  # an empty table hides nothing
        names = ", ".join(cols[i].header for i in layout.dropped)
        note = f"({names} left out to fit {width} columns; --wide shows them)"
        for line in wrap_words(note, width):
            console.print(line, markup=False, highlight=False, soft_wrap=True)


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
    console = _console()
    if wide:
        console.print(text, markup=False, highlight=False, soft_wrap=True)
        return
    for line in wrap_words(text, terminal_width(), hang):  # already fits: rich must not wrap
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def report_error(exc: DethpcError) -> None:
    """An expected failure, said on stderr as every command says it (its exit code is
    the caller's: ``exc.exit_code``)."""
    err_console = _err_console()
    err_console.print("[red]error:[/]", end=" ")
    err_console.print(str(exc), markup=False, highlight=False)


def fmt_metric(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"
