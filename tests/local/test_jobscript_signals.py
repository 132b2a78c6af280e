"""The rendered trial job script never loses a preemption signal, whenever it comes.

A site's template (``{% extends "base/trial.sbatch.j2" %}``) overrides the
``prologue`` block to signal the batch shell at a chosen moment; the script is
run by bash exactly as a backend runs it.

* before the training step starts: the step is not started at all (nothing
  has trained since the last checkpoint); the run ends ``preempted``, 128+12;
* while the step is being forked and started (a background ``kill`` after
  0-200 ms, with and without a handler in the step): the signal reaches the
  step, which dies of it or checkpoints and exits 80; it never trains on;
* no signal: the run completes.

This was a real loss on a fast CI machine: ``scancel --signal=USR2 --batch``
landed between the traps and ``child=$!`` and the trial trained on; and a
signal forwarded to a just-forked child before its ``exec`` is dropped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dethpc.common.exitcodes import EXIT_PREEMPTED, LOCAL_REQUEUE_EXIT
from dethpc.common.paths import ExperimentPaths
from dethpc.config import parse_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.jobs.jobscript import trial_script
from dethpc.jobs.render import make_env

CLUSTER = ClusterConfig(pools={"default": ResourcePool(
    name="default", partition="debug", default_time="00:10:00", signal="USR2",
    signal_grace_s=60)})

# the training step: installs its handler only when told to, then trains 0.5 s
TRAIN = """
import os, signal, sys, time
from pathlib import Path
def stop(signum, frame):
    Path("handled").write_text(str(signum)); sys.exit(80)
if os.environ.get("WITH_HANDLER") == "1":
    signal.signal(signal.SIGUSR2, stop)
Path("started").write_text("")
time.sleep(0.5)
Path("trained").write_text("")
"""

# prologue lines: when the batch shell is signalled, before the step is started
PROLOGUES = {
    "before_step": "kill -s USR2 $$",
    "none": "",
    **{f"after_{ms}ms": f"(sleep {ms / 1000}; kill -s USR2 $$) &" for ms in (0, 5, 20, 50, 200)},
}


def run_script(tmp_path: Path, prologue: str, with_handler: bool) -> tuple[int, dict, Path]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "trial.sbatch.j2").write_text(
        '{% extends "base/trial.sbatch.j2" %}{% block prologue %}'
        + prologue + "{% endblock %}\n")
    paths = ExperimentPaths(tmp_path / "run").ensure()
    paths.context.mkdir()
    (paths.context / "train.py").write_text(TRAIN)
    trial = paths.trial(1).root
    trial.mkdir(parents=True)
    cfg = parse_experiment_config({
        "name": "t", "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}})
    text = trial_script(cfg, CLUSTER, backend="local", python=sys.executable,
                        run_dir=paths.root, exp_id=1, trial_id=1,
                        jenv=make_env(site))
    script = trial / "job.sbatch"
    script.write_text(text)
    env = {**os.environ, "WITH_HANDLER": "1" if with_handler else "0"}
    proc = subprocess.run(["bash", str(script)], env=env, timeout=60)
    exits = [json.loads(line) for line in (trial / "exits.jsonl").read_text().splitlines()]
    assert len(exits) == 1, exits
    return proc.returncode, exits[0], paths.context


KILLED = 128 + signal.SIGUSR2


@pytest.mark.parametrize("prologue, with_handler, codes, script_rc, started, trained", [
    ("before_step", False, {KILLED}, LOCAL_REQUEUE_EXIT, False, False),
    ("before_step", True, {KILLED}, LOCAL_REQUEUE_EXIT, False, False),
    *[(f"after_{ms}ms", handler, {KILLED, EXIT_PREEMPTED}, LOCAL_REQUEUE_EXIT, None, False)
      for ms in (0, 5, 20, 50, 200) for handler in (False, True)],
    ("none", True, {0}, 0, True, True),
])
def test_signal_is_never_lost(tmp_path: Path, prologue: str, with_handler: bool,
                              codes: set[int], script_rc: int, started: bool | None,
                              trained: bool) -> None:
    rc, exit_record, context = run_script(tmp_path, PROLOGUES[prologue], with_handler)
    assert exit_record["code"] in codes, exit_record
    assert rc == script_rc, exit_record
    assert (context / "trained").exists() is trained, exit_record
    if started is not None:
        assert (context / "started").exists() is started, exit_record
    if prologue == "none":
        assert exit_record["reason"] == "completed" and exit_record["signal"] == "", exit_record
    else:
        assert exit_record["reason"] == "preempted" and exit_record["signal"] == "USR2", \
            exit_record
