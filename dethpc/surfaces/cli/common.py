"""What every CLI command shares: the cluster config, the store, the backend, output.

Owns: lazy construction of those (so ``config validate`` needs no database),
JSON/rich printing helpers. Must not: hold logic the library lacks.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dethpc.backends.base import Backend
from dethpc.config import load_cluster_config
from dethpc.config.model import ClusterConfig
from dethpc.store import Store
from dethpc.surfaces.layout import GAP, Col, cell_lines, fit, one_line, terminal_width, wrap_words

console = Console()
#: errors are never hard-wrapped: a path or a command to copy from them stays one line
err_console = Console(stderr=True, soft_wrap=True)


@dataclass
class Env:
    cluster_path: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def cluster(self) -> ClusterConfig:
        """The file's config; with none anywhere, what Slurm's answers imply on a login
        node (``slurm_detect``: one probe, cached in ``$DETHPC_HOME``), else local.
        Its ``slurm_bin``/``slurm_conf`` are put into this process's environment, as a
        site's ``module load slurm`` would: every Slurm command dethpc runs, the daemon it
        starts and the jobs it submits (which inherit the environment) use them."""
        from dethpc.backends.slurm_detect import detect
        from dethpc.common.paths import dethpc_home
        from dethpc.config.cluster import slurm_client_env

        cfg = load_cluster_config(self.cluster_path, detect=lambda: detect(
            dethpc_home(), say=lambda text: err_console.print(text, markup=False)))
        os.environ.update(slurm_client_env(cfg, os.environ))
        return cfg

    @cached_property
    def store(self) -> Store:
        """The state database: the user's own credentials file when there is one
        (``dethpc.store.credentials``); on a shared database, a normal role must be the
        Unix user's (``dethpc.store.access.check_identity``). A SQLite file on a network
        filesystem is said once per home (``dethpc.store.location.check_store``)."""
        from dethpc.control.experiments import current_user
        from dethpc.store.access import check_identity
        from dethpc.store.credentials import database_url

        store = Store(database_url(self.cluster) or None)
        m = store.migration
        if m is not None and m.start is not None:  # an existing database was upgraded
            err_console.print(f"dethpc: upgraded database {store.safe_url} from schema "
                              f"revision {m.start} to {m.head} (docs/store.md)")
        check_identity(store.role, current_user(), store.safe_url)
        from dethpc.common.paths import dethpc_home
        from dethpc.store.location import check_store

        # a SQLite file on NFS/Lustre/GPFS...: said once per home, on stderr
        check_store(store.url, dethpc_home(),
                    say=lambda text: err_console.print(text, markup=False, highlight=False))
        return store

    @cached_property
    def backend(self) -> Backend:
        from dethpc.backends.factory import make_backend

        return make_backend(self.cluster)


ENV = Env()


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
    plain printable ASCII (wide or combining characters, which rich measures in cells) or
    is wider than its column (rich would cut it). tests/unit/surfaces/test_cli_tables.py
    compares the two byte for byte."""
    gap = " " * GAP
    lines = []
    for row in rows:
        for v, w in zip(row, widths, strict=True):
            if len(v) > w or not (v.isascii() and v.isprintable()):
                return None
        lines.append(gap.join(v.ljust(w) for v, w in zip(row, widths, strict=True)) + "\n")
    return "".join(lines)


def say(text: str, *, wide: bool = False, hang: int = 0) -> None:
    """A line of prose (no markup), wrapped at spaces to the terminal's width (lines
    after the first indented ``hang`` spaces); a word longer than the width is cut with
    ``…``; ``wide``: one line, nothing cut."""
    if wide:
        console.print(text, markup=False, highlight=False, soft_wrap=True)
        return
    for line in wrap_words(text, terminal_width(), hang):  # already fits: rich must not wrap
        console.print(line, markup=False, highlight=False, soft_wrap=True)


WideOpt = typer.Option(False, "--wide", "-w", help="full values, however wide (no "
                       "column cut or left out to fit the terminal)")
JsonOpt = typer.Option(False, "--json", help="print JSON instead of a table")


def fmt_metric(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def untracked_note(open_experiments: int, now: float | None = None, *,
                   read_now: bool = False) -> str | None:
    """What to say under a view of ``open_experiments`` not-ended experiments when no
    daemon of this user runs (none here, no live lease from another login node): that
    their state is not being updated, since when, and how to start one; ``read_now``:
    the view read the jobs' state from Slurm just now (``catch_up_if_untracked``). None
    when a daemon runs or nothing is open."""
    import time

    from dethpc.control.experiments import current_user
    from dethpc.store.models import DaemonLease
    from dethpc.surfaces import views

    if open_experiments <= 0 or views.daemon_running(ENV.store, current_user()):
        return None
    if read_now:
        return (f"note: no dethpc daemon is running: the state of the {open_experiments} "
                "open experiment(s) shown was read from Slurm just now, but nothing new is "
                "submitted until `dethpc daemon start`")
    with ENV.store.session() as s:
        row = s.get(DaemonLease, current_user())
    now = time.time() if now is None else now
    if row is None or not row.expires_at:
        since = "no daemon of yours has run on this database yet"
    else:
        age = max(0.0, now - (row.expires_at - ENV.cluster.daemon_lease_s))
        since = f"the last daemon tick was {_age(age)} ago"
    return (f"note: no dethpc daemon is running: the {open_experiments} open "
            f"experiment(s) shown are not being updated ({since}). `dethpc daemon start` "
            "tracks them again (jobs that ended meanwhile are read from Slurm's accounting)")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def say_if_untracked(states: list[str], *, read_now: bool = False) -> None:
    """``untracked_note`` for a view of experiments in ``states`` (those the daemon must
    act on: neither ended nor paused), on stderr."""
    from dethpc.store.models import ExperimentState

    moving = [s for s in map(ExperimentState, states) if s.needs_daemon]
    note = untracked_note(len(moving), read_now=read_now)
    if note:
        err_console.print(note, markup=False, highlight=False)
