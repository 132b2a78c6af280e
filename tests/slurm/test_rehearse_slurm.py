"""Issue 35 item 3: rehearse a preemption, and a time limit, on a running managed trial
(``dethpc trial preempt``, ``dethpc.control.rehearse``). The rehearsal sends what Slurm
sends (the pool's early signal to the batch shell); the trial checkpoints, its job
requeues itself and resumes at the step it stopped at; the rehearsed time limit is
recorded ``time_limit``; no restart is counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dethpc.common.errors import DethpcError
from dethpc.control.rehearse import Rehearsal, Target, find_target, rehearse
from tests.slurm.fixtures.harness import (
    DaemonHarness,
    experiment_yaml,
    read_jsonl,
    steps_log,
)

BATCHES = 120
HPARAMS = {"step_time": 0.1}


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    # 20 s of grace: the rehearsal waits that long for the job to requeue itself
    h = DaemonHarness.create(tmp_path / "dethpc", debug_grace_s=20)
    yield h
    h.cancel_all_experiments()


def running_target(h: DaemonHarness, exp: int, run: int, steps: int) -> Target | None:
    """The trial's job as the store knows it once run ``run`` trained ``steps`` batches."""
    if sum(1 for r, _ in steps_log(h.trial_dir(exp)) if r == run) < steps:
        return None
    try:
        target = find_target(h.store, h.cluster, h.trial(exp).id or 0)
    except DethpcError:
        return None
    return target if target.run == run else None


def test_rehearsed_preemption_and_time_limit_requeue_resume_and_are_free(
        harness: DaemonHarness) -> None:
    h = harness
    exp = h.submit(experiment_yaml(batches=BATCHES, pool="debug", hparams=HPARAMS))
    h.wait("the trial's job", lambda: h.job_ref(exp))
    trial_dir = h.trial_dir(exp)
    outcomes = []
    for run, what in enumerate([Rehearsal.PREEMPTION, Rehearsal.TIME_LIMIT]):
        target = h.wait(f"run {run} to train", partial(running_target, h, exp, run, 15),
                        timeout=480)
        outcomes += rehearse(h.store, h.backend, [target], what)
    done = h.wait_done(exp, timeout=400)

    assert done.state == "COMPLETED", h.story(exp)
    trial = h.trial(exp)
    assert trial.restarts == 0 and trial.steps_completed == BATCHES, h.story(exp)
    exits = read_jsonl(trial_dir / "exits.jsonl")
    assert [(e["reason"], e["signal"]) for e in exits] == \
        [("preempted", "USR2"), ("time_limit", "USR2"), ("completed", "")], h.story(exp)
    # the job requeued itself (its own decision), well inside the grace
    assert [o.by_itself for o in outcomes] == [True, True], outcomes
    runs = read_jsonl(trial_dir / "runs.jsonl")
    assert [r["preempted"] for r in runs] == [True, True, False], runs
    for before, after in zip(runs, runs[1:], strict=False):
        assert after["first_batch"] == before["batches_done"], runs   # nothing lost
    rehearsals = [m for k, m in h.events(exp) if k == "rehearsal"]
    assert len(rehearsals) == 4 and "requeued itself" in rehearsals[1], rehearsals


def test_a_dethpc_sbatch_job_rehearses_a_preemption_with_the_cli(
        tmp_path: Path, slurm_cluster: Any) -> None:
    """The existing array script under ``dethpc sbatch`` (it checkpoints when
    ``dethpc should-stop`` says so): ``dethpc trial preempt ID`` sends the wrapper the
    early signal, the script stops at its next step and checkpoints, the wrapper requeues
    the task, which resumes after the checkpoint and completes; nothing is counted and no
    step is lost."""
    import shutil
    import subprocess
    import sys

    from tests.slurm.fixtures.sbatch_kit import (
        dethpc_sbatch,
        env_for,
        experiment_of_job,
        sbatch_home,
        tick_until,
    )

    script = Path(__file__).parent / "fixtures" / "existing_scripts" / "array_train.sh"
    with sbatch_home(tmp_path) as (root, store, daemon):
        work = tmp_path / "work"
        work.mkdir()
        shutil.copy2(script, work / script.name)
        steps = 40
        proc = dethpc_sbatch(root, work, "--parsable", "-p", "debug", "--array=0",
                             script.name, STEPS=str(steps))
        assert proc.returncode == 0, proc.stderr
        jid = proc.stdout.strip()
        exp_id = experiment_of_job(store, jid)
        log = work / "steps-0.log"
        d = tick_until(store, daemon, exp_id, 180, until=lambda d: d["trials"][0]["state"]
                       == "RUNNING" and log.exists() and len(log.read_text().splitlines()) >= 5)
        trial_id = d["trials"][0]["id"]
        cli = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "trial",
                              "preempt", str(trial_id)], env=env_for(root), cwd=work,
                             capture_output=True, text=True, timeout=180)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        d = tick_until(store, daemon, exp_id, 240)
        (t,) = d["trials"]
        trial_dir = Path(d["run_dir"]) / "trials" / str(t["id"])
        exits = read_jsonl(trial_dir / "exits.jsonl")
        why = f"{cli.stdout} {d['state']} {t} {exits}"
        assert d["state"] == "COMPLETED" and t["restarts"] == 0, why
        assert [e["reason"] for e in exits] == ["preempted", "completed"], why
        assert {e["job"] for e in exits} == {f"{jid}_0"}, why
        lines = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
        assert [step for step, _ in lines] == list(range(1, steps + 1)), lines  # none lost
        assert {run for _, run in lines} == {0, 1}, lines


def test_a_pool_workers_trial_rehearses_a_preemption_on_its_worker(
        tmp_path: Path, slurm_cluster: Any) -> None:
    """A trial run by a pool worker (``slurm.workers``): the rehearsal signals the worker
    that holds it (its lease names the worker's job), as a preemption of that worker
    does; the worker forwards it, its trial checkpoints, the worker hands the trial back
    and requeues itself within the grace, and the trial resumes from its checkpoint and
    completes; nothing is counted. A time-limit rehearsal of it is refused."""
    import shutil

    from dethpc.common.errors import DethpcError as Refused

    h = DaemonHarness.create(tmp_path / "dethpc", debug_grace_s=20)
    try:
        ctx = tmp_path / "ctx"
        ctx.mkdir()
        toy = Path(__file__).resolve().parents[1] / "fixtures" / "toy" / "train.py"
        shutil.copy(toy, ctx / "train.py")
        exp = h.submit({
            "name": "pool-rehearsal", "entrypoint": "python3 train.py",
            "hyperparameters": {"x": 3, "step_time": 0.2, "save_every": 5},
            "searcher": {"name": "single", "metric": "validation_loss",
                         "max_length": {"batches": 80}},
            "resources": {"resource_pool": "debug"}, "max_restarts": 2,
            "slurm": {"workers": {"count": 1, "preload": ["dethpc.core"],
                                  "heartbeat_s": 1, "idle_exit_s": 10}}}, context=ctx)
        trial_dir = h.wait("the trial", lambda: h.trial_dir(exp), timeout=120)

        def trained_target() -> Target | None:
            metrics = trial_dir / "metrics.jsonl"
            if not metrics.exists() or len(metrics.read_text().splitlines()) < 12:
                return None
            try:
                return find_target(h.store, h.cluster, h.trial(exp).id or 0)
            except DethpcError:
                return None

        target = h.wait("the trial to train in its worker", trained_target, timeout=300,
                        story_of=exp)
        assert target.pooled and not target.ref.startswith("pool:"), target
        with pytest.raises(Refused, match="pool worker"):
            rehearse(h.store, h.backend, [target], Rehearsal.TIME_LIMIT)
        (outcome,) = rehearse(h.store, h.backend, [target], Rehearsal.PREEMPTION)
        assert outcome.by_itself, outcome
        done = h.wait_done(exp, timeout=400)
        trial = h.trial(exp)
        assert done.state == "COMPLETED", h.story(exp)
        assert trial.restarts == 0 and trial.steps_completed == 80, h.story(exp)
        logs = "".join(p.read_text(errors="replace") for p in Path(h.experiment(exp).run_dir)
                       .rglob("*") if p.is_file() and p.suffix in (".out", ".log"))
        assert "toy: resumed at step" in logs, logs[-3000:]
        rehearsals = [m for k, m in h.events(exp) if k == "rehearsal"]
        assert len(rehearsals) == 2 and "requeued itself" in rehearsals[1], rehearsals
    finally:
        h.cancel_all_experiments()
