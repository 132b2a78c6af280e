"""Live progress of an experiment, for ``experiment wait`` and ``submit --follow``/``--wait``.

Owns: the counts shown (trials done, running, queued and paused; the best searcher
metric so far and its trial) read from the store (``read``, pure ``summarize``), the
plain line that says them (``plain_line``), and showing them on stderr
(``Reporter``): rich's progress display when stderr is a terminal, else one plain line
per change, with no control characters (a log file, CI, a pipe).
Must not: change state.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import IO, TYPE_CHECKING

from sqlmodel import select

from dethpc.store import Store
from dethpc.store.models import Experiment, Trial, TrialState
from dethpc.surfaces.cli.common import fmt_metric

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

#: trial states counted as queued: waiting for a job, or for the searcher's decision
QUEUED_STATES = frozenset({TrialState.QUEUED, TrialState.WAITING})


@dataclass(frozen=True)
class Snapshot:
    """What the progress display says about one experiment at one moment."""

    exp_id: int
    state: str
    progress: float
    done: int
    running: int
    queued: int
    paused: int
    metric: str
    best: float | None
    best_trial: int | None


def summarize(exp_id: int, state: str, progress: float, metric: str, smaller_is_better: bool,
              trials: Iterable[tuple[int, str, float | None]]) -> Snapshot:
    """The counts of ``(trial id, state, best validation)`` rows: done = ended (completed,
    stopped, canceled, errored), queued = QUEUED or WAITING, paused = PAUSED."""
    done = running = queued = paused = 0
    best: tuple[float, int, float] | None = None  # (key, trial, value): least key wins
    for tid, raw, value in trials:
        st = TrialState(raw)
        done += st.is_terminal
        running += st is TrialState.RUNNING
        queued += st in QUEUED_STATES
        paused += st is TrialState.PAUSED
        if value is not None:
            key = value if smaller_is_better else -value
            if best is None or (key, tid) < best[:2]:
                best = (key, tid, value)
    return Snapshot(exp_id, str(state), progress, done, running, queued, paused, metric,
                    best[2] if best else None, best[1] if best else None)


def read(store: Store, exp_id: int) -> Snapshot:
    """The experiment's snapshot now (one query for the experiment, one for its trials)."""
    from dethpc.config.stored import parse_stored

    for _ in range(5):
        # SQLite runs each SELECT on its own snapshot: read the experiment's state again
        # after its trials, so a line never pairs an old state with new trials (seen: a
        # tick that completed the experiment read as "ACTIVE 50%: 3 done")
        with store.session() as s:
            exp = s.get(Experiment, exp_id)
            if exp is None:
                from dethpc.common.errors import NotFoundError

                raise NotFoundError(f"experiment {exp_id} does not exist")
            before = (exp.state, exp.progress)
            rows = list(s.exec(select(Trial.id, Trial.state, Trial.best_validation)
                               .where(Trial.experiment_id == exp_id)))
            s.refresh(exp)
            if (exp.state, exp.progress) == before:
                break
    assert exp is not None
    searcher = parse_stored(exp.config_yaml).searcher
    from dethpc.surfaces.views import shown_progress

    return summarize(exp_id, exp.state, shown_progress(exp), searcher.metric,
                     searcher.smaller_is_better,
                     [(int(tid or 0), str(st), bv) for tid, st, bv in rows])


def counts_text(s: Snapshot) -> str:
    """``2 done, 1 running, 2 queued; best val_loss 0.25 (trial 2)``."""
    paused = f", {s.paused} paused" if s.paused else ""
    best = ("none yet" if s.best is None
            else f"{fmt_metric(s.best)} (trial {s.best_trial})")
    return (f"{s.done} done, {s.running} running, {s.queued} queued{paused}; "
            f"best {s.metric} {best}")


def plain_line(s: Snapshot) -> str:
    """One line, never cut (a log keeps it whole): ``experiment 3 ACTIVE 40%: 2 done,
    1 running, 2 queued; best val_loss 0.25 (trial 2)``."""
    return f"experiment {s.exp_id} {s.state} {s.progress:.0%}: {counts_text(s)}"


class Reporter:
    """Shows snapshots on stderr: a rich progress bar on a terminal (``tty``), else a
    plain line each time the line changes. ``redirect_stdout``: on a terminal, what the
    command writes to stdout meanwhile (``--follow``'s log) prints above the bar."""

    def __init__(self, *, tty: bool | None = None, redirect_stdout: bool = False,
                 stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.redirect_stdout = redirect_stdout
        self._last = ""
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> Reporter:
        if self.tty:
            self._progress = _two_line_progress(self.stream, self.redirect_stdout)
            self._progress.start()
        return self

    def update(self, s: Snapshot) -> None:
        if self._progress is not None:
            what = f"experiment {s.exp_id} {s.state}"
            if self._task is None:
                self._task = self._progress.add_task(what, total=1000,  # per mille
                                                     completed=round(s.progress * 1000),
                                                     counts=counts_text(s))
            else:
                self._progress.update(self._task, description=what,
                                      completed=round(s.progress * 1000), counts=counts_text(s))
            return
        line = plain_line(s)
        if line != self._last:
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last = line

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()


def _two_line_progress(stream: IO[str], redirect_stdout: bool) -> Progress:
    """rich's progress display in two lines, so it fits 80 columns: ``experiment 3
    ACTIVE`` with the bar, its percentage and the time waited; then the counts and the
    best metric, wrapped at spaces."""
    from rich.console import Console, RenderableType
    from rich.progress import (
        BarColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as RichProgress
    from rich.text import Text

    class TwoLines(RichProgress):
        def get_renderables(self) -> Iterable[RenderableType]:
            yield self.make_tasks_table(self.tasks)
            for task in self.tasks:
                yield Text(str(task.fields.get("counts", "")))

    return TwoLines(TextColumn("{task.description}"), BarColumn(bar_width=30),
                    TaskProgressColumn(), TimeElapsedColumn(),
                    console=Console(file=stream, force_terminal=True),
                    redirect_stdout=redirect_stdout, redirect_stderr=False,
                    refresh_per_second=4)
