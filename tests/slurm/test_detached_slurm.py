"""Issue 13, item 4 on the dev cluster: a plain ``sbatch`` job (the real sbatch, no dethpc
in the submission, ``#SBATCH --requeue`` in the user's own script) whose Python calls
``dethpc.core.init()`` registers itself in the spool; the daemon adopts it, so
``dethpc experiment list`` shows it (kind detached) and ``describe`` its metrics and
checkpoint; ``scontrol requeue`` of the job makes the next run resume from
``latest_checkpoint`` (no step lost: steps 1..N each reported once per run that did
them, run 1 starts after the checkpointed step) and the experiment ends COMPLETED;
``dethpc trial logs`` shows the job's own ``--output`` file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlmodel import select

from dethpc.backends.slurm import SlurmBackend
from dethpc.common.kinds import ExperimentKind
from dethpc.common.runner import RecordingRunner
from dethpc.config.model import ClusterConfig
from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.store.models import Experiment, Metric, Trial
from tests.slurm.fixtures.harness import scancel_store_jobs

REPO = Path(__file__).resolve().parents[2]
STEPS = 6
#: the first run stops after this step and waits to be requeued
HOLD_AT = 3

TRAIN = f'''\
import os, sys, time
from dethpc import core

with core.init() as ctx:
    run = ctx.info.run_id
    latest = ctx.info.latest_checkpoint
    start = 0
    if latest is not None:
        with ctx.checkpoint.restore_path(latest) as path:
            start = int((path / "step").read_text())
    print(f"run {{run}} resumes after step {{start}} ({{latest}})", flush=True)
    for step in range(start + 1, {STEPS} + 1):
        ctx.train.report_training_metrics(step, {{"loss": 1.0 / step}})
        ctx.train.report_validation_metrics(step, {{"val_loss": 1.0 / step}})
        with ctx.checkpoint.store_path({{"steps_completed": step}}) as (path, uuid):
            (path / "step").write_text(str(step))
        print(f"run {{run}} step {{step}}", flush=True)
        while run == 0 and step == {HOLD_AT}:
            time.sleep(0.2)   # the test requeues the job here
'''


def job_script(tmp_path: Path) -> Path:
    script = tmp_path / "job.sh"
    script.write_text(f"""#!/bin/bash
#SBATCH --job-name=plain-detached
#SBATCH --partition=debug
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output={tmp_path}/slurm-%j.out
cd {tmp_path}
exec {sys.executable} train.py
""")
    (tmp_path / "train.py").write_text(TRAIN)
    return script


@pytest.fixture
def home(tmp_path: Path, slurm_cluster: Any,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Store, Daemon]]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "cluster.yaml").write_text(yaml.safe_dump({
        "backend": "slurm", "runs_root": str(home / "runs")}))
    monkeypatch.setenv("DETHPC_HOME", str(home))   # the daemon's spool: <home>/spool
    store = Store(f"sqlite:///{home / 'dethpc.db'}")
    cluster = ClusterConfig(backend="slurm", runs_root=home / "runs", tick_min_s=0.2,
                            tick_max_s=1.0)
    daemon = Daemon(store, cluster, SlurmBackend(RecordingRunner(timeout=30.0)))
    yield home, store, daemon
    scancel_store_jobs(store)


def cli(home: Path, *args: Any) -> str:
    env = {**os.environ, "DETHPC_HOME": str(home),
           "DETHPC_CLUSTER_CONFIG": str(home / "cluster.yaml")}
    # the test ticks its own daemon: dethpc sbatch must not start one
    args = ("sbatch", "--no-daemon", *args[1:]) if args[:1] == ("sbatch",) else args
    proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, f"{args}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


def drive(daemon: Daemon, what: str, done: Any, timeout: float = 90.0) -> Any:
    """Tick the daemon until ``done()`` returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = daemon.tick()
        assert not stats.errors, stats.errors
        value = done()
        if value:
            return value
        time.sleep(0.3)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")


def trial_of(store: Store) -> Trial | None:
    with store.session() as s:
        return s.exec(select(Trial)).first()


def test_plain_sbatch_job_registers_is_adopted_and_resumes_after_requeue(
        home: tuple[Path, Store, Daemon], tmp_path: Path, slurm_cluster: Any) -> None:
    root, store, daemon = home
    env = {**os.environ, "DETHPC_HOME": str(root), "DETHPC_METRIC": "val_loss",
           "PYTHONPATH": str(REPO)}
    job = subprocess.run(["sbatch", "--parsable", str(job_script(tmp_path))], env=env,
                         capture_output=True, text=True, check=True, timeout=30)
    job_id = job.stdout.strip().split(";")[0]

    # adopted, and the first run reaches the step where it waits
    drive(daemon, f"step {HOLD_AT} of job {job_id}",
          lambda: (t := trial_of(store)) is not None and t.steps_completed >= HOLD_AT)
    listed = json.loads(cli(root, "experiment", "list", "--json"))
    assert [(e["name"], e["kind"], e["state"]) for e in listed] == [
        ("plain-detached", "detached", "ACTIVE")]
    assert "detached" in cli(root, "experiment", "list")
    exp_id = listed[0]["id"]
    d = json.loads(cli(root, "experiment", "describe", exp_id, "--json"))
    (trial,) = d["trials"]
    assert trial["best_validation"] == pytest.approx(1.0 / HOLD_AT)
    assert trial["best_checkpoint"] and trial["state"] == "RUNNING"
    assert "kind: detached" in cli(root, "experiment", "describe", exp_id)

    subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=30)
    drive(daemon, "the experiment to end",
          lambda: (e := _exp(store)).state.is_terminal and e, timeout=120)
    exp = _exp(store)
    t = trial_of(store)
    assert t is not None
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert exp.kind == ExperimentKind.DETACHED and exp.state == "COMPLETED", (exp, out)
    assert t.state == "COMPLETED" and t.steps_completed == STEPS and t.restarts == 0, out
    assert f"run 1 resumes after step {HOLD_AT}" in out, out
    with store.session() as s:
        steps = [m.steps for m in s.exec(select(Metric).where(Metric.kind == "training")
                                         .order_by(Metric.id))]  # type: ignore[arg-type]
    assert steps == list(range(1, STEPS + 1)), steps   # nothing redone, nothing lost
    d = json.loads(cli(root, "experiment", "describe", exp_id, "--json"))
    assert d["state"] == "COMPLETED" and d["trials"][0]["best_checkpoint"]
    # the job's own --output file, as Slurm resolved it at registration
    assert f"run 1 step {STEPS}" in cli(root, "trial", "logs", t.id)


def _exp(store: Store) -> Experiment:
    with store.session() as s:
        exp = s.exec(select(Experiment)).one()
        return exp
