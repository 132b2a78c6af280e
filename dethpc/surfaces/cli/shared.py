"""What two command groups do alike: a trial's log stream, a checkpoint table, and a
rehearsed preemption.

Owns: ``stream_trial_log`` (``dethpc trial logs`` and ``dethpc experiment logs``; a trial
that ended without output gets its exit reason, ``unrun_note``) and
``print_checkpoints`` (``dethpc experiment list-checkpoints`` and ``dethpc checkpoint
list``) and ``rehearse_targets`` with its options (``dethpc trial preempt`` and
``dethpc experiment preempt``), so that neither command module imports the other.
Must not: define commands.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dethpc.common.paths import ExperimentPaths
from dethpc.control import experiments
from dethpc.store.models import TrialState
from dethpc.surfaces import views
from dethpc.surfaces.cli.common import (
    ENV,
    console,
    fmt_metric,
    print_json,
    table,
)
from dethpc.surfaces.cli.daemon_cmd import UntrackedLook
from dethpc.surfaces.cli.show import say_unrun, unrun_note  # noqa: F401 - unrun_note: re-exported
from dethpc.surfaces.layout import Col

if TYPE_CHECKING:
    from dethpc.control.rehearse import Target


def print_checkpoints(exp_id: int, *, json_out: bool, wide: bool) -> None:
    """Checkpoints of an experiment (deleted ones included, marked), as a table or JSON."""
    rows = views.checkpoints_of(ENV.store, exp_id)
    if json_out:
        print_json(rows)
        return
    table(f"Checkpoints of experiment {exp_id}",
          [Col("uuid", shrink=True, min_width=36, keep=100), Col("trial", keep=90),
           Col("steps", keep=80), Col("metric", keep=70), Col("state", keep=85),
           Col("path", shrink=True, min_width=12, keep=20)],
          [[c["uuid"], c["trial_id"], c["steps_completed"], fmt_metric(c["validation_metric"]),
            c["state"], c["path"]] for c in rows], wide=wide)


def stream_trial_log(trial_id: int, *, follow: bool, tail: int) -> None:
    """Print a trial's job output; with ``follow``, keep printing until the trial ends.
    A trial that ended without output gets its exit reason on stderr (``unrun_note``)."""
    d = views.trial_detail(ENV.store, trial_id)
    exp = experiments.get_experiment(ENV.store, d["experiment_id"])
    tp = ExperimentPaths(Path(exp.run_dir)).trial(trial_id)
    text = b"".join(p.read_bytes() for p in tp.logs()).decode(errors="replace")
    if tail:
        text = "\n".join(text.splitlines()[-tail:]) + "\n"
    sys.stdout.write(text)
    sys.stdout.flush()
    printed = bool(text.strip())
    if not follow:
        say_unrun(d, printed)
        return
    sizes = {p: p.stat().st_size for p in tp.logs()}
    untracked = UntrackedLook(lambda: [experiments.get_experiment(
        ENV.store, d["experiment_id"]).state.value])
    while True:
        untracked.look()
        # one last read after the trial ended: its final lines may land just before
        done = TrialState(views.trial_detail(ENV.store, trial_id)["state"]).is_terminal
        for p in tp.logs():
            size = p.stat().st_size
            if size > sizes.get(p, 0):
                with open(p, "rb") as f:
                    f.seek(sizes.get(p, 0))
                    chunk = f.read().decode(errors="replace")
                    sys.stdout.write(chunk)
                    sys.stdout.flush()
                    printed = printed or bool(chunk.strip())
                sizes[p] = size
        if done:
            say_unrun(views.trial_detail(ENV.store, trial_id), printed)
            return
        time.sleep(0.5)


# ------------------------------------------------------------------ preempt
TimeLimitOpt = typer.Option(
    False, "--time-limit",
    help="rehearse the time limit instead: the same early signal, recorded time_limit")
WaitOpt = typer.Option(
    True, "--wait/--no-wait",
    help="wait for the job to requeue itself (at most the pool's signal_grace_s), and "
         "requeue it then if it has not, as Slurm does when a preemption's grace ends")


def rehearse_targets(targets: Sequence[Target], time_limit: bool, wait: bool) -> None:
    """Rehearse on each target's job (``dethpc.control.rehearse``), saying what it does."""
    from dethpc.control.rehearse import Rehearsal, rehearse

    what = Rehearsal.TIME_LIMIT if time_limit else Rehearsal.PREEMPTION
    for t in targets:
        console.print(f"trial {t.trial_id}: SIG{t.signal} to job {t.ref} (run {t.run})"
                      + (f"; waiting up to {t.grace_s} s for it to requeue itself"
                         if wait else ""), highlight=False, soft_wrap=True)
    for out in rehearse(ENV.store, ENV.backend, list(targets), what, wait=wait):
        console.print(out.summary(what), highlight=False, soft_wrap=True)
