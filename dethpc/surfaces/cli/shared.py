"""What two command groups print alike: a trial's log stream and a checkpoint table.

Owns: ``stream_trial_log`` (``dethpc trial logs`` and ``dethpc experiment logs``) and
``print_checkpoints`` (``dethpc experiment list-checkpoints`` and ``dethpc checkpoint
list``), so that neither command module imports the other.
Must not: define commands.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from dethpc.common.paths import ExperimentPaths
from dethpc.control import experiments
from dethpc.store.models import TrialState
from dethpc.surfaces import views
from dethpc.surfaces.cli.common import ENV, fmt_metric, print_json, table
from dethpc.surfaces.layout import Col


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
    """Print a trial's job output; with ``follow``, keep printing until the trial ends."""
    d = views.trial_detail(ENV.store, trial_id)
    exp = experiments.get_experiment(ENV.store, d["experiment_id"])
    tp = ExperimentPaths(Path(exp.run_dir)).trial(trial_id)
    text = b"".join(p.read_bytes() for p in tp.logs()).decode(errors="replace")
    if tail:
        text = "\n".join(text.splitlines()[-tail:]) + "\n"
    sys.stdout.write(text)
    sys.stdout.flush()
    if not follow:
        return
    sizes = {p: p.stat().st_size for p in tp.logs()}
    while True:
        # one last read after the trial ended: its final lines may land just before
        done = TrialState(views.trial_detail(ENV.store, trial_id)["state"]).is_terminal
        for p in tp.logs():
            size = p.stat().st_size
            if size > sizes.get(p, 0):
                with open(p, "rb") as f:
                    f.seek(sizes.get(p, 0))
                    sys.stdout.write(f.read().decode(errors="replace"))
                    sys.stdout.flush()
                sizes[p] = size
        if done:
            return
        time.sleep(0.5)
