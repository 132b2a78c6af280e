"""Issue 13, item 5 on the dev cluster: ``dethpc sbatch --search search.yaml script.sh``
runs adaptive ASHA over an unchanged bash script (tests/slurm/fixtures/existing_scripts/
search_train.sh: a loop calling a small python step, reporting validation through
``dethpc report metrics --validation``, checkpointing with ``dethpc report
checkpoint``, exiting when ``dethpc should-stop`` says yes).

Through the real CLI and the real sbatch: the experiment is recorded (kind script)
and printed as ``Submitted experiment N``; the daemon submits the trials as one array
carrying the script's own ``#SBATCH`` lines, the jobs start in the submit directory
and write the script's own ``--output`` files there; the experiment COMPLETES, ASHA
stops losers (each STOPPED trial's script saw ``dethpc should-stop`` say yes for a
searcher stop, stop-acks.jsonl, and exited early through it: exit record
``stopped``), and at least one trial trains to max_length (COMPLETED).

One bracket (``mode: aggressive``): rungs at 4 and 16 steps for 6 trials all running
at once; every trial that reaches step 4 behind a better one is stopped there (only the
best so far is kept), so losers are certain whatever the order. A step takes
``STEP_PAUSE_S`` plus the job API calls: a stop decided at step 4 has 12 steps to land.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
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
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.store.models import Experiment, Job
from dethpc.surfaces.views import describe_experiment
from tests.backend_polling import submits
from tests.slurm.fixtures.harness import read_jsonl, scancel_store_jobs, wait_until

FIXTURES = Path(__file__).parent / "fixtures" / "existing_scripts"
REPO = Path(__file__).resolve().parents[2]
MAX_LENGTH = 16
TRIALS = 6
STOP_GRACE_S = 60    # longer than a whole trial: scancel must not stand in for the stop
SEARCH = {
    "name": "lr sweep over a bash script",
    "searcher": {"name": "adaptive_asha", "metric": "loss", "smaller_is_better": True,
                 "mode": "aggressive", "max_trials": TRIALS,
                 "max_length": {"batches": MAX_LENGTH}, "max_concurrent_trials": TRIALS,
                 "stop_grace_s": STOP_GRACE_S},
    "hyperparameters": {"lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1}},
    "reproducibility": {"experiment_seed": 13},
    "max_restarts": 0,
}


@pytest.fixture
def home(tmp_path: Path,
         slurm_cluster: Any) -> Iterator[tuple[Path, Store, Daemon, RecordingRunner]]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "cluster.yaml").write_text(yaml.safe_dump({
        "backend": "slurm", "runs_root": str(home / "runs"),
        "pools": {"default": {"partition": "debug", "signal_grace_s": 30}}}))
    store = Store(f"sqlite:///{home / 'dethpc.db'}")
    cluster = ClusterConfig(backend="slurm", runs_root=home / "runs", tick_min_s=0.2,
                            tick_max_s=1.0, pools={"default": ResourcePool(
                                name="default", partition="debug", signal_grace_s=30)})
    runner = RecordingRunner(timeout=30.0)
    daemon = Daemon(store, cluster, SlurmBackend(runner))
    yield home, store, daemon, runner
    scancel_store_jobs(store)


def dethpc(home: Path, cwd: Path, *args: str,
           extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DETHPC_HOME": str(home),
           "DETHPC_CLUSTER_CONFIG": str(home / "cluster.yaml"), "PYTHONPATH": str(REPO),
           "STEP_PAUSE_S": "0.5", **(extra_env or {})}
    # the test ticks its own daemon: dethpc sbatch must not start one
    args = ("sbatch", "--no-daemon", *args[1:]) if args[:1] == ("sbatch",) else args
    return subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)


def drive(store: Store, daemon: Daemon, exp_id: int, timeout: float) -> float:
    """Tick the daemon until the experiment ends; the seconds it took."""
    started = time.monotonic()
    while time.monotonic() < started + timeout:
        stats = daemon.tick()
        assert not stats.errors, stats.errors
        with store.session() as s:
            exp = s.get(Experiment, exp_id)
            assert exp is not None
            if exp.state.is_terminal:
                break
        time.sleep(0.3)
    return time.monotonic() - started


def test_grid_over_a_script_that_knows_nothing_of_dethpc(
        home: tuple[Path, Store, Daemon, RecordingRunner], tmp_path: Path) -> None:
    """A script with no job API at all: each trial gets its values (odd ones included)
    as DETHPC_HP_* and in $DETHPC_HPARAMS, its arguments, the submit directory and the
    submitting environment; the script's own #SBATCH lines decide (the later
    --partition wins) and its --output files are written where it says; exit 0 is
    COMPLETED."""
    root, store, daemon, runner = home
    submit_dir = tmp_path / "plain"
    submit_dir.mkdir()
    shutil.copy2(FIXTURES / "search_plain.sh", submit_dir / "search_plain.sh")
    names = ["a b", "it's $HOME"]
    (submit_dir / "search.yaml").write_text(yaml.safe_dump({
        "searcher": {"name": "grid", "metric": "loss", "max_concurrent_trials": 4},
        "hyperparameters": {"lr": {"type": "categorical", "vals": [0.1, 0.01]},
                            "name": {"type": "categorical", "vals": names}}}))
    proc = dethpc(root, submit_dir, "sbatch", "--parsable", "--search", "search.yaml",
                  "--time=3", "search_plain.sh", "x y", extra_env={"SEARCH_TEST_MARK": "m1"})
    assert proc.returncode == 0, proc.stderr
    exp_id = int(proc.stdout)
    elapsed = drive(store, daemon, exp_id, 120)
    d = describe_experiment(store, exp_id)
    states = [t["state"] for t in d["trials"]]
    print(f"grid over a plain script: {d['state']} in {elapsed:.1f}s, trials {states}, "
          f"sbatch {submits(runner)}")
    assert d["state"] == "COMPLETED" and states == ["COMPLETED"] * 4, states
    outputs = sorted(submit_dir.glob("plain-*_*.out"))
    assert len(outputs) == 4, outputs
    texts = [p.read_text() for p in outputs]
    seen = sorted(line.split(" args=")[0] for t in texts for line in t.splitlines()
                  if line.startswith("lr="))
    assert seen == sorted(f"lr={lr} name={n}" for lr in (0.1, 0.01) for n in names), seen
    assert all(f"args=x y cwd={submit_dir}" in t for t in texts), texts
    assert all("from submit env: m1" in t for t in texts), texts
    (array,) = (Path(d["run_dir"]) / "arrays").glob("*.sbatch")
    job = array.read_text()
    assert "#SBATCH --partition=low\n#SBATCH --output=plain-%A_%a.out\n" in job
    # the later --partition of the script wins; the command line's --time beats the script's
    with store.session() as s:
        refs = {j.ref for j in s.exec(select(Job).where(Job.experiment_id == exp_id))}
    (array_job,) = {str(r).split("_")[0] for r in refs}

    def accounted() -> list[str] | None:
        rows = subprocess.run(["sacct", "-n", "-P", "-X", "-j", array_job,
                               "-o", "JobID,Partition,Timelimit"], capture_output=True,
                              text=True, check=False).stdout.split()
        tasks = [r for r in rows if r.split("|")[0].startswith(f"{array_job}_")]
        return tasks if len(tasks) == 4 else None   # slurmdbd may lag a moment

    rows = wait_until("the array's accounting", accounted, timeout=60)
    assert all(r.split("|", 1)[1] == "debug|00:03:00" for r in rows), rows


@pytest.mark.skipif(importlib.util.find_spec("dethpc.launch.jobapi") is None,
                    reason="needs the shell-level job API (dethpc report/should-stop, "
                           "issue 13 item 3: dethpc.launch.jobapi)")
def test_asha_over_an_unchanged_bash_script(
        home: tuple[Path, Store, Daemon, RecordingRunner], tmp_path: Path) -> None:
    root, store, daemon, runner = home
    submit_dir = tmp_path / "project"
    submit_dir.mkdir()
    for name in ("search_train.sh", "search_step.py"):
        shutil.copy2(FIXTURES / name, submit_dir / name)
    (submit_dir / "search.yaml").write_text(yaml.safe_dump(SEARCH))

    proc = dethpc(root, submit_dir, "sbatch", "--search", "search.yaml", "search_train.sh")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Submitted experiment "), proc.stdout
    exp_id = int(proc.stdout.split()[-1])

    elapsed = drive(store, daemon, exp_id, 150)
    d = describe_experiment(store, exp_id)
    run_dir = Path(d["run_dir"])
    summary = [(t["id"], t["state"], t["searcher_status"], t["steps_completed"])
               for t in d["trials"]]
    print(f"experiment {exp_id}: {d['state']} in {elapsed:.1f}s, trials {summary}, "
          f"sbatch {submits(runner)}")
    assert d["state"] == "COMPLETED", summary
    with store.session() as s:
        assert s.get(Experiment, exp_id).kind == ExperimentKind.SCRIPT  # type: ignore[union-attr]
    assert len(d["trials"]) == TRIALS

    stopped = [t for t in d["trials"] if t["state"] == "STOPPED"]
    completed = [t for t in d["trials"] if t["state"] == "COMPLETED"]
    assert stopped, f"ASHA stopped no loser: {summary}"
    assert any(t["steps_completed"] == MAX_LENGTH for t in completed), summary
    for t in stopped:
        tdir = run_dir / "trials" / str(t["id"])
        acks = read_jsonl(tdir / "stop-acks.jsonl")
        exits = read_jsonl(tdir / "exits.jsonl")
        assert any(a["why"] == "stop" for a in acks), (t, acks)     # the script asked
        assert exits and exits[-1]["reason"] == "stopped", (t, exits)
        assert t["searcher_status"] == "stopped"
        assert t["steps_completed"] < MAX_LENGTH, t                 # and stopped early
    for t in completed:
        assert not (run_dir / "trials" / str(t["id"]) / "stop-acks.jsonl").exists()
        assert t["best_checkpoint"], t

    # one array for the whole search, with the script's own lines; the jobs ran in the
    # submit directory and wrote the script's own --output files there
    arrays = sorted((run_dir / "arrays").glob("*.sbatch"))
    assert len(arrays) == 1, arrays
    text = arrays[0].read_text()
    assert "#SBATCH --output=search-%A_%a.out" in text and "#SBATCH --requeue" in text
    outputs = sorted(submit_dir.glob("search-*_*.out"))
    assert len(outputs) == TRIALS, outputs
    assert any(f"trained {MAX_LENGTH} steps" in p.read_text() for p in outputs)
    with store.session() as s:
        assert s.exec(select(Experiment)).one().id == exp_id
    print(json.dumps({"elapsed_s": round(elapsed, 1), "stopped": len(stopped),
                      "completed": len(completed)}))
