"""Determined's ``startup-hook.sh`` on the dev cluster (issue 12, item 4).

A two-node trial: the hook runs once on each node of the allocation before the
entrypoint starts, and again, on each node, in the run after ``scontrol requeue``
of the running job. Each hook task appends ``hook <run> <node> <nodelist>`` to the
trial's ``order.log``; the entrypoint appends ``entry <run>`` before it trains.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dethpc.common.hostlist import expand_hostlist
from tests.slurm.fixtures.harness import DaemonHarness, experiment_yaml, job_log, read_jsonl

TOY = Path(__file__).resolve().parents[1] / "fixtures" / "toy"
HOOK = """\
echo "hook on $SLURMD_NODENAME: trial $DETHPC_TRIAL_ID run $DETHPC_RUN_ID"
echo "hook $DETHPC_RUN_ID $SLURMD_NODENAME $SLURM_JOB_NODELIST" >>"$DETHPC_TRIAL_DIR/order.log"
export HOOK_EXPORT="run-$DETHPC_RUN_ID"
"""
# the entrypoint sees what the hook exported (node 0's), as Determined sources the hook
ENTRYPOINT = ["bash", "-c", 'echo "entry $DETHPC_RUN_ID ${HOOK_EXPORT:-unset}" '
              '>>"$DETHPC_TRIAL_DIR/order.log"; exec python3 train.py']


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc")
    yield h
    h.cancel_all_experiments()


def order(trial_dir: Path) -> list[list[str]]:
    path = trial_dir / "order.log"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def runs_in_order(lines: list[list[str]]) -> dict[int, list[list[str]]]:
    """run -> its lines; asserts that every run's hooks come before its entrypoint."""
    by_run: dict[int, list[list[str]]] = {}
    for line in lines:
        by_run.setdefault(int(line[1]), []).append(line)
    for run, seen in by_run.items():
        kinds = [line[0] for line in seen]
        assert kinds == ["hook", "hook", "entry"], (run, seen)
    return by_run


def test_hook_runs_once_per_node_before_the_entrypoint_and_again_after_requeue(
        harness: DaemonHarness, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    shutil.copy(TOY / "train.py", ctx / "train.py")
    (ctx / "startup-hook.sh").write_text(HOOK)
    raw = experiment_yaml(batches=150, hparams={"x": 1.0, "step_time": 0.2})
    raw.update(entrypoint=ENTRYPOINT, resources={"resource_pool": "debug", "slots_per_trial": 2})
    exp = harness.submit(raw, context=ctx)
    ref = harness.wait("the trial's job", lambda: harness.job_ref(exp))
    trial_dir = harness.trial_dir(exp)

    # run 0 trains (its entrypoint started and reported a step): requeue the running job
    harness.wait("run 0 to train", lambda: ["entry", "0", "run-0"] in order(trial_dir)
                 and (trial_dir / "metrics.jsonl").exists(), timeout=300)
    subprocess.run(["scontrol", "requeue", ref], check=True, timeout=30)
    harness.wait("run 1 to start its entrypoint",
                 lambda: ["entry", "1", "run-1"] in order(trial_dir), timeout=400)
    done = harness.wait_done(exp, timeout=400)
    assert done.state == "COMPLETED", harness.events(exp)

    by_run = runs_in_order(order(trial_dir))
    assert sorted(by_run) == [0, 1], by_run
    for run, seen in by_run.items():
        hooks = [line for line in seen if line[0] == "hook"]
        allocated = expand_hostlist(hooks[0][3])
        assert len(allocated) == 2, (run, hooks)
        # once on each node of this run's allocation
        assert sorted(line[2] for line in hooks) == sorted(allocated), (run, hooks)
    log = job_log(trial_dir)
    assert log.count("dethpc: running startup-hook.sh on 2 node(s)") == 2, log[-3000:]
    assert log.count("dethpc: startup-hook.sh exited with code 0") == 2, log[-3000:]
    for node in {line[2] for seen in by_run.values() for line in seen if line[0] == "hook"}:
        assert f"hook on {node}: trial " in log
    reasons = [e["reason"] for e in read_jsonl(trial_dir / "exits.jsonl")]
    assert reasons[-1] == "completed" and len(reasons) == 2, reasons


def test_hook_failing_on_one_node_fails_the_run(harness: DaemonHarness, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    shutil.copy(TOY / "train.py", ctx / "train.py")
    (ctx / "startup-hook.sh").write_text(
        'echo "hook on $SLURMD_NODENAME (node $SLURM_NODEID)"\n'
        'if [ "$SLURM_NODEID" = 1 ]; then echo "hook: pip install failed"; exit 3; fi\n')
    raw = experiment_yaml(batches=20, hparams={"x": 1.0, "step_time": 0.05}, max_restarts=0)
    raw.update(entrypoint=ENTRYPOINT, resources={"resource_pool": "debug", "slots_per_trial": 2})
    exp = harness.submit(raw, context=ctx)
    done = harness.wait_done(exp, timeout=300)
    assert done.state != "COMPLETED", harness.events(exp)
    trial_dir = harness.trial_dir(exp)
    assert harness.trial(exp).state == "ERROR"
    assert order(trial_dir) == []  # the entrypoint never started
    log = job_log(trial_dir)
    assert "hook: pip install failed" in log and "(node 0)" in log, log[-3000:]
    assert "startup-hook.sh failed (exit code 3); not starting the training step" in log
    assert [(e["reason"], e["code"]) for e in read_jsonl(trial_dir / "exits.jsonl")] == [
        ("error", 3)]
