"""Watching an experiment from the CLI until it ends: ``submit --follow/--wait/--test``
and ``experiment wait``.

Owns: ``_follow`` (the first trial's log streamed, progress on stderr) and ``_wait``
(progress only), both returning the experiment's final state.
Must not: hold logic that the library lacks.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from dethpc.common.errors import DethpcError
from dethpc.common.paths import ExperimentPaths
from dethpc.control import experiments
from dethpc.store.models import ExperimentState
from dethpc.surfaces.cli.common import ENV, console
from dethpc.surfaces.cli.daemon_cmd import UntrackedLook

if TYPE_CHECKING:
    from dethpc.surfaces.cli.progress import Reporter


def _follow(exp_id: int) -> str:
    """Stream the first trial's log until the experiment ends; its final state. Progress
    on stderr meanwhile (``dethpc.surfaces.cli.progress``): a bar, the log printing above it,
    when stdout and stderr are both terminals, else plain lines on stderr."""
    import sys

    from dethpc.surfaces.cli import progress

    with progress.Reporter(tty=sys.stdout.isatty() and sys.stderr.isatty(),
                           redirect_stdout=True) as shown:
        state = _follow_log(exp_id, shown)
    console.print(f"experiment {exp_id} {state}")  # after the display ended: below it
    return state


def _follow_log(exp_id: int, shown: Reporter) -> str:
    import sys

    from dethpc.surfaces.cli import progress

    offset, current, done_reading = 0, None, False
    while True:
        shown.update(progress.read(ENV.store, exp_id))
        exp = experiments.get_experiment(ENV.store, exp_id)
        trials = experiments.trials_of(ENV.store, exp_id)
        if trials and trials[0].id is not None:
            logs = ExperimentPaths(Path(exp.run_dir)).trial(trials[0].id).logs()
            if logs:
                if logs[-1] != current:
                    current, offset = logs[-1], 0
                with open(current, "rb") as f:
                    f.seek(offset)
                    data = f.read()
                offset += len(data)
                if data:
                    sys.stdout.write(data.decode(errors="replace"))
                    sys.stdout.flush()
        if ExperimentState(exp.state).is_terminal and done_reading:
            return str(exp.state)
        done_reading = ExperimentState(exp.state).is_terminal  # one more read, then stop
        if not done_reading:
            time.sleep(0.5)


def _wait(exp_id: int, timeout: float | None, *, show: bool = True) -> str:
    """Wait until the experiment ends; its final state. ``show``: progress on stderr
    (``dethpc.surfaces.cli.progress``: a bar on a terminal, else one plain line per change)."""
    from dethpc.surfaces.cli import progress

    deadline = None if timeout is None else time.monotonic() + timeout
    # no daemon running: the jobs' ends are read from Slurm every few seconds (said once,
    # on stderr), so a wait on a `dethpc sbatch --no-daemon` job still ends
    untracked = UntrackedLook(lambda: [progress.read(ENV.store, exp_id).state])
    with progress.Reporter(tty=None if show else False) as shown:
        while True:
            untracked.look()
            snap = progress.read(ENV.store, exp_id)
            if show:
                shown.update(snap)
            if ExperimentState(snap.state).is_terminal:
                return snap.state
            if deadline is not None and time.monotonic() > deadline:
                raise DethpcError(f"experiment {exp_id} still {snap.state} after "
                                  f"{timeout:.0f}s")
            time.sleep(0.5)
