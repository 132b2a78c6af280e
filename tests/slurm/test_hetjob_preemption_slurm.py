"""Issue 36 item 1: a heterogeneous trial (``slurm.components``: a server component and
two trainer ranks, the PersiaML shape) in the preemptible ``low`` pool is preempted by a
``high`` job. The whole heterogeneous job gets the early signal, the trainers checkpoint,
the job is requeued under the same id, resumes from that checkpoint with no step lost,
and its restart count stays 0: a preemption is never a failure.

Slurm submits a heterogeneous job alone (it cannot be an array task), so its job's
reference is the plain id: the exit records of its runs must carry that same reference
or the daemon cannot tell a preempted run from a failed one.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.fixtures.harness import (
    TRIAL_DIR,
    DaemonHarness,
    experiment_yaml,
    job_log,
    max_step,
    preempt,
    read_jsonl,
    steps_log,
)

REPO = Path(__file__).resolve().parents[2]
BATCHES = 200
HPARAMS = {"step_time": 0.1}


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc", slots_per_node=2)
    yield h
    h.cancel_all_experiments()


def het_context(root: Path) -> Path:
    """The preemption fixture's trainer beside the het fixture's server."""
    ctx = root / "context"
    shutil.copytree(TRIAL_DIR, ctx, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "tests" / "fixtures" / "het" / "server.py", ctx / "server.py")
    return ctx


def het_trial(pool: str) -> dict[str, Any]:
    raw = experiment_yaml(batches=BATCHES, pool=pool, hparams=HPARAMS)
    raw["name"] = f"het-{pool}"
    raw["entrypoint"] = ("python3 -m dethpc.launch.torch_distributed --mode srun -- "
                         f"python3 train.py --batches {BATCHES}")
    raw["resources"] = {"resource_pool": pool, "slots_per_trial": 2}
    raw["slurm"] = {"components": [{"name": "server", "entrypoint": "python3 server.py",
                                    "ready": "port", "ready_timeout": 120}]}
    return raw


def test_preempted_het_trial_requeues_resumes_and_is_not_a_restart(
        harness: DaemonHarness, slurm_cluster: Any, tmp_path: Path) -> None:
    exp = harness.submit(het_trial("low"), context=het_context(tmp_path))
    ref = harness.wait("the het trial's job to be submitted", lambda: harness.job_ref(exp))
    assert ref.isdigit(), f"a heterogeneous job is a plain job, not an array task: {ref}"
    trial_dir = harness.trial_dir(exp)
    harness.wait("the trainers to train past their second checkpoint",
                 lambda: max_step(trial_dir) >= 25, timeout=480)
    preemptors = preempt(ref, lambda: bool(read_jsonl(trial_dir / "runs.jsonl")))
    try:
        first = harness.wait("the trainers to checkpoint and exit",
                             lambda: read_jsonl(trial_dir / "runs.jsonl"), timeout=120)
        assert first[0]["preempted"], "the trial ended before it was preempted"
        done = harness.wait_done(exp, timeout=480)
    finally:
        slurm_cluster.cancel(*preemptors)

    log = job_log(trial_dir)
    assert done.state == "COMPLETED", (harness.events(exp), log[-3000:])
    trial = harness.trial(exp)
    assert trial.state == "COMPLETED" and trial.steps_completed == BATCHES, log[-3000:]
    assert trial.restarts == 0, "a preemption must not count against max_restarts\n" + \
        "\n".join(map(str, harness.events(exp)))
    exits = read_jsonl(trial_dir / "exits.jsonl")
    extra = log.count("Slurm started it once more")
    exits = exits[:len(exits) - extra]
    assert len(exits) >= 2, exits
    # every run's exit record names the job the daemon submitted: the plain het job id
    assert {e["job"] for e in exits} == {ref}, exits
    assert [e["reason"] for e in exits] == ["preempted"] * (len(exits) - 1) + ["completed"]
    # both ranks of every run stopped at one step and the next run began there
    runs = read_jsonl(trial_dir / "runs.jsonl")
    by_run: dict[int, list[dict[str, Any]]] = {}
    for r in runs:
        by_run.setdefault(r["run"], []).append(r)
    assert sorted(by_run) == list(range(len(exits))), runs
    for n in range(len(exits) - 1):
        stopped = {r["batches_done"] for r in by_run[n]}
        began = {r["first_batch"] for r in by_run[n + 1]}
        assert len(stopped) == 1 and stopped == began, runs
    assert "component server is up (port" in log, log[-3000:]
    show = subprocess.run(["scontrol", "-o", "show", "job", ref], capture_output=True,
                          text=True, check=False).stdout
    if "Restarts=" in show:  # while slurmctld still remembers the job (MinJobAge)
        assert f"Restarts={len(exits) - 1 + extra}" in show, show


@pytest.fixture
def harness_long_grace(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc", slots_per_node=2, debug_grace_s=20)
    yield h
    h.cancel_all_experiments()


def test_het_trial_at_its_time_limit_checkpoints_and_requeues(
        harness_long_grace: DaemonHarness, tmp_path: Path) -> None:
    """The same heterogeneous trial under ``--time=1``: its first allocation ends on the
    pool's early signal before the limit, the trainers checkpoint, the job requeues
    itself (still RUNNING: ``dethpc.launch.run_end``), and the next run that trains
    resumes at the step the last one stopped at; the daemon counts no restart. A run
    whose start took longer than its allocation's 40 s before the early signal (CI's
    loaded 2 cores: stop 45) trains nothing and requeues itself as well. The test ends
    at the first step of the second run that trained: how many more allocations the
    rest takes depends on the machine's load (CI's took more than 600 s to finish 450
    batches), not on what is tested."""
    h = harness_long_grace
    raw = het_trial("debug")
    raw["entrypoint"] = raw["entrypoint"].replace(f"--batches {BATCHES}", "--batches 1000")
    raw["searcher"]["max_length"] = {"batches": 1000}
    raw["slurm"]["time"] = "1"
    exp = h.submit(raw, context=het_context(tmp_path))
    ref = h.wait("the het trial's job", lambda: h.job_ref(exp))
    trial_dir = h.trial_dir(exp)
    trained = h.wait("a second run to train a step", lambda: (
        lambda runs: runs[:2] if len(runs) >= 2 else None)(
            sorted({run for run, _ in steps_log(trial_dir)})), timeout=480, story_of=exp)
    stopped_run, resumed = trained
    h.wait("the daemon to see the requeue", lambda: h.job_restarts(exp) >= resumed,
           story_of=exp)
    trial = h.trial(exp)
    assert trial.restarts == 0 and trial.state in ("QUEUED", "RUNNING"), h.story(exp)
    exits = read_jsonl(trial_dir / "exits.jsonl")
    assert [(e["reason"], e["job"], e["restart"]) for e in exits][:resumed] == \
        [("time_limit", ref, n) for n in range(resumed)], h.story(exp)
    # both ranks stopped at one step, and the next run that trained began right after it
    steps = steps_log(trial_dir)
    stopped = {r["batches_done"] for r in read_jsonl(trial_dir / "runs.jsonl")
               if r["run"] == stopped_run}
    first = min(step for run, step in steps if run == resumed)
    last = max(step for run, step in steps if run == stopped_run)
    assert len(stopped) == 1 and max(stopped) == last and first == last + 1, h.story(exp)
