"""Determined's ``startup-hook.sh`` on the local backend (issue 12, item 4).

The hook at the root of the context directory runs once per run, before the
entrypoint (which sees what the hook exported, as Determined sources it), in the
trial's environment (DETHPC_* variables, the config's
environment_variables) with the context directory as its working directory; its
output is in the trial's log, and its failure fails the run (an ``error`` exit
record with the hook's code) without starting the entrypoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.local.conftest import TOY, cli, write_config

# the entrypoint notes that it started, then trains the toy trial
ENTRYPOINT = ["bash", "-c", 'echo "entry ${HOOK_EXPORT:-unset} ${HOOK_LOCAL:-unset}" '
              '>>"$DETHPC_TRIAL_DIR/order.log"; exec python3 train.py']
# sourced, as in Determined: what it exports reaches the entrypoint, a plain variable not
HOOK_OK = """\
echo "hook: trial=$DETHPC_TRIAL_ID run=$DETHPC_RUN_ID var=$HOOK_VAR cwd=$(pwd)"
echo "hook $DETHPC_RUN_ID" >>"$DETHPC_TRIAL_DIR/order.log"
export HOOK_EXPORT="from hook"
HOOK_LOCAL=not-exported
"""
# `false` fails the hook (Determined sources it under `set -e`): the last line never runs
HOOK_FAILS = """\
echo "hook: installing dependencies"
echo "hook $DETHPC_RUN_ID" >>"$DETHPC_TRIAL_DIR/order.log"
false
echo "hook: never printed"
"""


def context_with_hook(tmp_path: Path, hook: str) -> Path:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    shutil.copy(TOY / "train.py", ctx / "train.py")
    (ctx / "startup-hook.sh").write_text(hook)
    return ctx


def run_single(tmp_path: Path, hook: str) -> dict:
    cfg = write_config(
        tmp_path / "c.yaml", entrypoint=ENTRYPOINT, max_restarts=0,
        hyperparameters={"x": 2.0, "step_time": 0.01},
        searcher={"name": "single", "metric": "validation_loss", "max_length": {"batches": 4}},
        environment={"environment_variables": ["HOOK_VAR=hello"]})
    exp = json.loads(cli("submit", cfg, context_with_hook(tmp_path, hook), "--json").stdout)["id"]
    cli("experiment", "wait", exp, "--timeout", "180", check=False, timeout=200)
    return json.loads(cli("experiment", "describe", exp, "--json").stdout)


def trial_files(d: dict) -> tuple[Path, str, list[str], list[dict]]:
    trial = Path(d["run_dir"]) / "trials" / str(d["trials"][0]["id"])
    log = "".join(p.read_text() for p in sorted(trial.glob("slurm-*.out")))
    order = (trial / "order.log").read_text().split("\n")[:-1]
    exits = [json.loads(line) for line in (trial / "exits.jsonl").read_text().splitlines()]
    return trial, log, order, exits


def test_hook_runs_before_the_entrypoint_in_the_trials_environment(home, tmp_path):
    d = run_single(tmp_path, HOOK_OK)
    assert d["state"] == "COMPLETED", d
    trial, log, order, exits = trial_files(d)
    assert order == ["hook 0", "entry from hook unset"]  # once, before the entrypoint
    context = Path(d["run_dir"]) / "context"
    assert f"hook: trial={trial.name} run=0 var=hello cwd={context}" in log
    assert "dethpc: startup-hook.sh exited with code 0" in log
    assert [e["reason"] for e in exits] == ["completed"]


def test_failing_hook_fails_the_run_with_its_output_in_the_log(home, tmp_path):
    d = run_single(tmp_path, HOOK_FAILS)
    assert d["state"] != "COMPLETED", d
    assert d["trials"][0]["state"] == "ERROR", d["trials"]
    _, log, order, exits = trial_files(d)
    assert order == ["hook 0"]  # the entrypoint never started
    assert "hook: installing dependencies" in log
    assert "hook: never printed" not in log
    assert "startup-hook.sh failed (exit code 1); not starting the training step" in log
    assert [(e["reason"], e["code"]) for e in exits] == [("error", 1)]


def test_signal_during_the_hook_is_forwarded_and_the_entrypoint_never_starts(
        tmp_path: Path) -> None:
    """The job script run by bash as a backend runs it: a preemption signal while a slow
    hook runs reaches the hook, the entrypoint does not start, the run is preempted
    (the local backend's requeue exit code), and the next run sources the hook again."""
    import os
    import signal
    import subprocess
    import sys

    from dethpc.common.exitcodes import LOCAL_REQUEUE_EXIT
    from dethpc.common.paths import ExperimentPaths
    from dethpc.config import parse_experiment_config
    from dethpc.config.model import ClusterConfig, ResourcePool
    from dethpc.jobs.jobscript import trial_script

    cluster = ClusterConfig(pools={"default": ResourcePool(
        name="default", partition="debug", default_time="00:10:00", signal="USR2")})
    paths = ExperimentPaths(tmp_path / "run").ensure()
    paths.context.mkdir()
    (paths.context / "startup-hook.sh").write_text(
        'echo "hook $DETHPC_RUN_ID" >>"$DETHPC_TRIAL_DIR/order.log"\n'
        'if [ "$DETHPC_RUN_ID" = 0 ]; then kill -s USR2 "$PPID"; sleep 30; fi\n')
    trial = paths.trial(1).root
    trial.mkdir(parents=True)
    cfg = parse_experiment_config({
        "name": "t", "entrypoint": ENTRYPOINT[:2] + ['echo entry >>"$DETHPC_TRIAL_DIR/order.log"'],
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}})
    script = trial / "job.sbatch"
    script.write_text(trial_script(cfg, cluster, backend="local", python=sys.executable,
                                   run_dir=paths.root, exp_id=1, trial_id=1))
    codes = []
    for run in (0, 1):
        env = {**os.environ, "SLURM_RESTART_COUNT": str(run)}
        # the hook's parent is the batch shell on the local backend (no srun between)
        codes.append(subprocess.run(["bash", str(script)], env=env, timeout=60).returncode)
    exits = [json.loads(line) for line in (trial / "exits.jsonl").read_text().splitlines()]
    assert [(e["reason"], e["code"], e["signal"]) for e in exits] == [
        ("preempted", 128 + signal.SIGUSR2, "USR2"), ("completed", 0, "")]
    assert codes == [LOCAL_REQUEUE_EXIT, 0]
    assert (trial / "order.log").read_text().split("\n")[:-1] == ["hook 0", "hook 1", "entry"]
