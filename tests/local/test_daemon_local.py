"""End to end on the local backend: submit -> daemon -> jobs -> metrics -> completion,
with crashes of the daemon (SIGKILL mid-experiment, and between sbatch and commit)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.local.conftest import (
    TOY,
    cli,
    dethpc_processes,
    env_without_fault,
    wait_for,
    write_config,
)


def describe(exp_id):
    return json.loads(cli("experiment", "describe", exp_id, "--json").stdout)


def submit(cfg, *extra):
    out = cli("submit", cfg, TOY, "--json", *extra)
    return json.loads(out.stdout)["id"]


def exits_per_trial(run_dir):
    """trial id -> list of exit records (one per job end)."""
    out = {}
    for p in Path(run_dir, "trials").iterdir():
        f = p / "exits.jsonl"
        out[int(p.name)] = ([json.loads(line) for line in f.read_text().splitlines()]
                            if f.exists() else [])
    return out


def test_random_experiment_completes_with_metrics_and_checkpoints(home, tmp_path):
    cfg = write_config(tmp_path / "c.yaml")
    exp = submit(cfg)
    cli("experiment", "wait", exp, "--timeout", "180", timeout=200)
    d = describe(exp)
    assert d["state"] == "COMPLETED"
    assert len(d["trials"]) == 4
    for t in d["trials"]:
        assert t["state"] == "COMPLETED", t
        assert t["steps_completed"] == 10
        assert t["best_validation"] is not None
        assert t["best_checkpoint"]
    best = d["best_trial"]
    assert best["best_validation"] == min(t["best_validation"] for t in d["trials"])
    ckpts = json.loads(cli("experiment", "list-checkpoints", exp, "--json").stdout)
    assert ckpts and all(Path(c["path"]).is_dir() for c in ckpts if c["state"] == "COMPLETED")
    # every trial ran exactly once and completed
    for records in exits_per_trial(d["run_dir"]).values():
        assert [r["reason"] for r in records] == ["completed"]


def test_sigkill_daemon_mid_experiment_loses_and_duplicates_nothing(home, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", hyperparameters={
        "x": {"type": "double", "minval": 0, "maxval": 6}, "step_time": 0.3})
    exp = submit(cfg, "--no-daemon")
    trials = Path(describe(exp)["run_dir"]) / "trials"
    daemon = subprocess.Popen([sys.executable, "-m", "dethpc.surfaces.cli.main", "daemon", "run"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # kill it while a trial is training (its metrics file appears at the first step;
    # a file check, not a CLI call, so a loaded machine cannot miss the moment)
    wait_for(lambda: any(trials.glob("*/metrics.jsonl")), interval=0.02,
             what="a training trial")
    daemon.send_signal(signal.SIGKILL)
    daemon.wait()
    # the kill landed mid-experiment: most of the work was still to do
    assert len(exits_per_trial(describe(exp)["run_dir"])) < 4
    wait_for(lambda: cli("daemon", "status", check=False).returncode == 1, what="lock free")
    cli("daemon", "start")
    cli("experiment", "wait", exp, "--timeout", "180", timeout=200)
    d = describe(exp)
    assert d["state"] == "COMPLETED"
    assert len(d["trials"]) == 4 and all(t["state"] == "COMPLETED" for t in d["trials"])
    records = exits_per_trial(d["run_dir"])
    assert len(records) == 4
    for trial_id, recs in records.items():
        assert [r["reason"] for r in recs] == ["completed"], (trial_id, recs)


def test_fault_between_sbatch_and_commit_adopts_instead_of_resubmitting(home, tmp_path):
    cfg = write_config(tmp_path / "c.yaml")
    exp = submit(cfg, "--no-daemon")
    env = dict(os.environ, DETHPC_FAULT_POINT="after_sbatch")
    crashed = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "daemon", "run"],
                             env=env, capture_output=True, timeout=120)
    assert crashed.returncode == -signal.SIGKILL
    spool = Path(home) / "local-spool"
    submitted_before = sorted(p.name for p in spool.rglob("request.json"))
    assert len(submitted_before) == 2  # one array of 2 (max_concurrent_trials)
    cli("daemon", "start", env=env_without_fault())
    cli("experiment", "wait", exp, "--timeout", "180", timeout=200)
    d = describe(exp)
    assert d["state"] == "COMPLETED"
    events = json.loads(cli("experiment", "events", exp, "--json").stdout)
    assert any(e["kind"] == "adopted" for e in events)
    # 4 trials, 4 array tasks in all: nothing was submitted twice
    assert len(list(spool.rglob("request.json"))) == 4
    for recs in exits_per_trial(d["run_dir"]).values():
        assert [r["reason"] for r in recs] == ["completed"]


def test_failing_trial_is_retried_then_errors_past_max_restarts(home, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", hyperparameters={"fail": True},
                       searcher={"name": "single", "metric": "validation_loss",
                                 "max_length": {"batches": 5}}, max_restarts=2)
    exp = submit(cfg)
    state = cli("experiment", "wait", exp, "--timeout", "120", check=False, timeout=150)
    assert state.returncode == 1
    d = describe(exp)
    assert d["state"] == "ERROR"
    (t,) = d["trials"]
    assert t["state"] == "ERROR" and t["restarts"] == 3
    assert "max_restarts=2" in t["exit_reason"]
    assert [r["reason"] for r in exits_per_trial(d["run_dir"])[t["id"]]] == ["error"] * 3


def test_pause_checkpoints_and_activate_resumes(home, tmp_path):
    # The trial holds before its first step until the run directory is known (f25 saw
    # the whole 30 s of training pass during one `describe` under CI's load), and waits
    # after step 3 until the test lets it go, so the pause lands mid-training however
    # slow the CLI and the daemon's tick are (f33 saw 600 steps of 0.05 s end first)
    hold, wait = tmp_path / "hold", tmp_path / "wait"
    hold.touch()
    wait.touch()
    cfg = write_config(tmp_path / "c.yaml", hyperparameters={
        "x": 3.0, "step_time": 0.05, "hold_while": str(hold), "wait_at": 3,
        "wait_while": str(wait)},
        searcher={"name": "single", "metric": "validation_loss",
                  "max_length": {"batches": 100}})
    exp = submit(cfg)
    trials = Path(describe(exp)["run_dir"]) / "trials"
    hold.unlink()
    wait_for(lambda: sum(len(f.read_text().splitlines())
                         for f in trials.glob("*/metrics.jsonl")) >= 3,
             interval=0.05, what="some progress")
    cli("experiment", "pause", exp)
    state = wait_for(lambda: describe(exp)["trials"][0]["state"] in ("PAUSED", "COMPLETED")
                     and describe(exp)["trials"][0]["state"], what="paused trial")
    assert state == "PAUSED", "the trial completed before the pause took effect"
    paused_at = describe(exp)["trials"][0]["steps_completed"]
    assert paused_at == 3
    wait.unlink()
    cli("experiment", "activate", exp)
    cli("experiment", "wait", exp, "--timeout", "150", timeout=180)
    d = describe(exp)
    (t,) = d["trials"]
    assert t["state"] == "COMPLETED" and t["steps_completed"] == 100
    reasons = [r["reason"] for r in exits_per_trial(d["run_dir"])[t["id"]]]
    assert reasons == ["stopped", "completed"]
    log = cli("trial", "logs", t["id"]).stdout
    assert f"toy: resumed at step {paused_at}" in log


@pytest.mark.parametrize("action,trial_state", [("kill", "CANCELED"), ("cancel", "CANCELED")])
def test_kill_and_cancel_end_every_job(home, tmp_path, action, trial_state):
    cfg = write_config(tmp_path / "c.yaml", hyperparameters={
        "x": {"type": "double", "minval": 0, "maxval": 6}, "step_time": 0.2},
        searcher={"name": "random", "metric": "validation_loss", "max_trials": 6,
                  "max_concurrent_trials": 3, "max_length": {"batches": 200}})
    exp = submit(cfg)
    wait_for(lambda: sum(t["state"] == "RUNNING" for t in describe(exp)["trials"]) >= 2,
             what="running trials")
    cli("experiment", action, exp)
    state = cli("experiment", "wait", exp, "--timeout", "90", check=False, timeout=120)
    assert state.returncode == 1
    d = describe(exp)
    assert d["state"] == "CANCELED"
    assert all(t["state"] == trial_state for t in d["trials"])
    from dethpc.backends.local import LocalBackend

    backend = LocalBackend(Path(home) / "local-spool")
    spool = Path(home) / "local-spool"
    infos = backend.poll([p.parent.name for p in spool.rglob("request.json")])
    assert infos and all(i.state.is_terminal for i in infos.values())


def test_set_concurrency_cli_tops_up_and_refuses_bad_values(home, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", hyperparameters={"x": 3.0, "step_time": 0.05},
                       searcher={"name": "random", "metric": "validation_loss",
                                 "max_trials": 3, "max_concurrent_trials": 1,
                                 "max_length": {"batches": 200}})
    exp = submit(cfg, "--no-daemon")
    cli("daemon", "tick")
    assert len(describe(exp)["trials"]) == 1
    bad = cli("experiment", "set-concurrency", exp, "--", "-1", check=False)
    assert bad.returncode != 0 and "must be >= 0" in bad.stdout + bad.stderr
    assert "Traceback" not in bad.stdout + bad.stderr
    out = cli("experiment", "set-concurrency", exp, "3")
    assert "max_concurrent_trials 1 -> 3" in out.stdout
    cli("daemon", "tick")
    assert len(describe(exp)["trials"]) == 3       # topped up at once, not at the next exit
    cli("experiment", "kill", exp)
    cli("daemon", "start")
    state = cli("experiment", "wait", exp, "--timeout", "60", check=False, timeout=90)
    assert state.returncode == 1 and describe(exp)["state"] == "CANCELED"


def _daemons_of(home: Path) -> list[int]:
    """The live ``dethpc daemon run`` processes whose DETHPC_HOME is ``home``."""
    return [pid for pid, role in dethpc_processes(home).items() if role == "daemon"]


def test_submit_starts_the_daemon_at_its_first_line_and_a_refused_one_leaves_none(
        home, tmp_path):
    """The console script (``dethpc.surfaces.entry``) starts the daemon before the CLI's
    imports; a submit refused for its config stops that daemon before it exits, and a
    good one adopts it: one daemon, and the experiment completes."""
    entry = [sys.executable, "-m", "dethpc.surfaces.entry"]
    bad = write_config(tmp_path / "bad.yaml", max_restarts="often")
    out = subprocess.run([*entry, "submit", str(bad), str(TOY)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "max_restarts" in out.stderr, out
    assert "Traceback" not in out.stderr, out.stderr
    assert _daemons_of(home) == [], "the refused submit left a daemon running"
    good = write_config(tmp_path / "good.yaml")
    out = subprocess.run([*entry, "submit", str(good), str(TOY), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out
    exp = json.loads(out.stdout)["id"]
    pid = int((home / "daemon.pid").read_text())
    assert _daemons_of(home) == [pid]
    cli("experiment", "wait", exp, "--timeout", "180", timeout=200)
    assert describe(exp)["state"] == "COMPLETED"
