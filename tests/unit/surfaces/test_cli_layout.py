"""The pure table layout and progress logic behind the CLI's output (issue 17 item 4):
``dethpc.surfaces.layout`` (widths, cutting, wrapping, hyperparameters) and
``dethpc.surfaces.cli.progress`` (counts and the plain line), table-driven."""

from __future__ import annotations

import os
from typing import Any

import pytest

from dethpc.surfaces.cli.progress import Snapshot, plain_line, summarize
from dethpc.surfaces.layout import (
    Col,
    Layout,
    cell_lines,
    fit,
    flat_hparams,
    fmt_value,
    kv_text,
    truncate,
    wrap_words,
)


@pytest.mark.parametrize(("text", "width", "want"), [
    ("abcdef", 6, "abcdef"),
    ("abcdef", 10, "abcdef"),
    ("abcdef", 5, "abcd…"),
    ("abcdef", 1, "…"),
    ("abcdef", 0, ""),
    ("", 3, ""),
])
def test_truncate(text: str, width: int, want: str) -> None:
    assert truncate(text, width) == want


@pytest.mark.parametrize(("text", "width", "want"), [
    ("best val_loss", 20, ["best val_loss"]),
    ("best val_loss", 8, ["best", "val_loss"]),
    ("a b c d", 3, ["a b", "c d"]),
    ("short averyveryverylongword x", 10, ["short", "averyvery…", "x"]),
    ("", 5, [""]),
    ("  spaced   out  ", 20, ["spaced out"]),
])
def test_wrap_words_never_splits_a_word(text: str, width: int, want: list[str]) -> None:
    assert wrap_words(text, width) == want


@pytest.mark.parametrize(("text", "width", "hang", "want"), [
    ("hparams: a=1 b=2 c=3", 12, 2, ["hparams: a=1", "  b=2 c=3"]),
    ("k: averyveryverylongword", 12, 4, ["k:", "    averyve…"]),
    # a hang that leaves too little room is capped (8 characters stay for the words)
    ("a bbbbbbbbbb", 10, 9, ["a", "  bbbbbbb…"]),
])
def test_wrap_words_hanging_indent(text: str, width: int, hang: int, want: list[str]) -> None:
    assert wrap_words(text, width, hang) == want


FIXED = Col("state")
NAME = Col("name", shrink=True, min_width=4)
PATH = Col("path", shrink=True, min_width=6, keep=10)
ROWS = [["RUNNING", "experiment-one", "/a/rather/long/path/to/somewhere"],
        ["QUEUED", "two", "/p"]]


@pytest.mark.parametrize(("cols", "rows", "width", "want"), [
    # fits: natural widths
    ([FIXED, NAME], ROWS, 80, Layout((0, 1), (7, 14))),
    # no limit (--wide): natural widths, empty columns kept
    ([FIXED, NAME], [["A", ""]], None, Layout((0, 1), (5, 4))),
    # too wide: the shrinkable column gives way, the fixed one never does
    ([FIXED, NAME], ROWS, 15, Layout((0, 1), (7, 6))),
    # extra room goes to the narrowest shrinkable column first
    ([FIXED, NAME, PATH], ROWS, 30, Layout((0, 1, 2), (7, 10, 9))),
    # the floors do not fit: the least-kept column goes, named
    ([FIXED, NAME, PATH], ROWS, 16, Layout((0, 1), (7, 7), (2,))),
    # a column empty in every row is left out (nothing to say), not reported
    ([FIXED, Col("waiting for", shrink=True), NAME], [["QUEUED", "", "x"]], 80,
     Layout((0, 2), (6, 4))),
    # a header wraps at its spaces before a shrinkable cell is cut
    ([Col("best validation_loss"), NAME], [["0.5", "abcdefghij"]], 28,
     Layout((0, 1), (16, 10))),
    # one column wider than the terminal: cut to fit
    ([Col("x")], [["a" * 50]], 20, Layout((0,), (20,))),
])
def test_fit(cols: list[Col], rows: list[list[str]], width: int | None,
             want: Layout) -> None:
    got = fit(cols, rows, width)
    assert got == want
    if width is not None:
        assert got.total <= width


def test_cell_lines_cut_cells_and_wrap_headers() -> None:
    cols = [Col("best val_loss"), Col("hparams", shrink=True)]
    cells = [["0.25", "lr=0.1 width=64 depth=12"]]
    headers, rows = cell_lines(cols, cells, Layout((0, 1), (8, 12)))
    assert headers == ["best\nval_loss", "hparams"]
    assert rows == [["0.25", "lr=0.1 widt…"]]


@pytest.mark.parametrize(("value", "want"), [
    (0.000123456, "0.0001235"), (3.0, "3"), (32, "32"), ("sgd", "sgd"), (True, "true"),
    (None, "null"), ([1, 2], "[1,2]"), ({"a": 1}, '{"a":1}'), (float("inf"), "inf"),
])
def test_fmt_value(value: Any, want: str) -> None:
    assert fmt_value(value) == want


@pytest.mark.parametrize(("hparams", "flat", "kv"), [
    ({"lr": 0.1}, {"lr": 0.1}, "lr=0.1"),
    ({"model": {"width": 8, "act": "relu"}, "lr": 1e-4},
     {"model.width": 8, "model.act": "relu", "lr": 1e-4}, "model.width=8 model.act=relu lr=0.0001"),
    ({"a": {"b": {"c": 1}}, "e": {}}, {"a.b.c": 1, "e": {}}, "a.b.c=1 e={}"),
    ({}, {}, ""),
])
def test_flat_hparams_and_kv(hparams: dict[str, Any], flat: dict[str, Any], kv: str) -> None:
    assert flat_hparams(hparams) == flat
    assert kv_text(hparams) == kv


@pytest.mark.parametrize(("sib", "rows", "want"), [
    (True, [], (0, 0, 0, 0, None, None)),
    (True, [(1, "COMPLETED", 0.5), (2, "RUNNING", 0.25), (3, "QUEUED", None),
            (4, "WAITING", 0.9), (5, "PAUSED", None), (6, "ERROR", None)],
     (2, 1, 2, 1, 0.25, 2)),
    (False, [(1, "COMPLETED", 0.5), (2, "STOPPED", 0.25), (3, "CANCELED", 0.7)],
     (3, 0, 0, 0, 0.7, 3)),
    # equal metrics: the earlier trial is the best
    (True, [(7, "COMPLETED", 0.1), (3, "COMPLETED", 0.1)], (2, 0, 0, 0, 0.1, 3)),
])
def test_summarize(sib: bool, rows: list[tuple[int, str, float | None]],
                   want: tuple[Any, ...]) -> None:
    s = summarize(4, "ACTIVE", 0.5, "loss", sib, rows)
    assert (s.done, s.running, s.queued, s.paused, s.best, s.best_trial) == want


@pytest.mark.parametrize(("snap", "want"), [
    (Snapshot(3, "ACTIVE", 0.4, 2, 1, 2, 0, "val_loss", 0.25, 2),
     "experiment 3 ACTIVE 40%: 2 done, 1 running, 2 queued; best val_loss 0.25 (trial 2)"),
    (Snapshot(3, "PAUSED", 0.0, 0, 0, 1, 3, "acc", None, None),
     "experiment 3 PAUSED 0%: 0 done, 0 running, 1 queued, 3 paused; best acc none yet"),
])
def test_plain_line(snap: Snapshot, want: str) -> None:
    assert plain_line(snap) == want


@pytest.mark.parametrize("columns", [None, "100", "0", "-3", "abc", "", "7"])
@pytest.mark.parametrize("terminal", [False, True])
def test_terminal_columns_are_shutils(monkeypatch: pytest.MonkeyPatch, columns: str | None,
                                      terminal: bool) -> None:
    """``layout`` reads the width as ``shutil.get_terminal_size`` does (without importing
    shutil): ``COLUMNS`` when a positive number, else the terminal of ``sys.__stdout__``
    (a pseudo-terminal 123 columns wide here), else 80."""
    import fcntl
    import shutil
    import struct
    import sys
    import termios

    from dethpc.surfaces import layout

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setenv("LINES", "24")   # shutil asks the terminal only for what is unset
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 123, 0, 0))
        with open(slave if terminal else os.devnull, "w", closefd=not terminal) as out:
            monkeypatch.setattr(sys, "__stdout__", out)
            want = shutil.get_terminal_size(fallback=(80, 24)).columns
            assert layout._columns() == want
            assert want == (int(columns) if columns and columns.lstrip("-").isdigit()
                            and int(columns) > 0 else 123 if terminal else 80)
    finally:
        os.close(master)
        os.close(slave)
