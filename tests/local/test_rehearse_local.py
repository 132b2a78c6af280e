"""``dethpc trial preempt`` end to end on the local backend (issue 35 item 3): the command
finds the trial's running job, sends it the pool's early signal, and waits until the job
requeued itself; the trial resumes from its checkpoint and completes without a counted
restart. And its clear errors: an unknown trial, a trial with no running job.
(On Slurm: tests/slurm/test_rehearse_slurm.py.)"""

import json
from pathlib import Path

from tests.local.conftest import TOY, cli, wait_for, write_config


def describe(exp_id):
    return json.loads(cli("experiment", "describe", exp_id, "--json").stdout)


def test_trial_preempt_rehearses_a_preemption_that_costs_no_restart(home, tmp_path):
    # the trial holds before its first step until the test saw its job running (a CLI
    # `describe` takes seconds under CI's load: the whole run could pass meanwhile)
    hold = tmp_path / "hold"
    hold.touch()
    cfg = write_config(tmp_path / "c.yaml", hyperparameters={
        "x": 3.0, "step_time": 0.05, "hold_while": str(hold)},
        searcher={"name": "single", "metric": "validation_loss",
                  "max_length": {"batches": 400}})
    exp = json.loads(cli("submit", cfg, TOY, "--json").stdout)["id"]
    trial_dir = Path(describe(exp)["run_dir"]) / "trials"

    def running_trial():
        trials = describe(exp)["trials"]
        return trials[0]["id"] if trials and trials[0]["state"] == "RUNNING" else None

    trial = wait_for(running_trial, timeout=180, what="the trial's job running")
    hold.unlink()
    wait_for(lambda: sum(len(f.read_text().splitlines())
                         for f in trial_dir.glob("*/metrics.jsonl")) >= 3,
             interval=0.05, what="some progress")
    out = cli("trial", "preempt", trial, timeout=180)
    assert "requeued itself" in out.stdout, out.stdout + out.stderr
    cli("experiment", "wait", exp, "--timeout", "240", timeout=300)

    d = describe(exp)
    (t,) = d["trials"]
    assert (t["state"], t["steps_completed"], t["restarts"]) == ("COMPLETED", 400, 0), d
    exits = [json.loads(line) for line in
             (trial_dir / str(trial) / "exits.jsonl").read_text().splitlines()]
    assert [e["reason"] for e in exits] == ["preempted", "completed"], exits
    log = cli("trial", "logs", trial).stdout
    assert "toy: resumed at step" in log, log[-2000:]
    events = cli("experiment", "events", exp, "--wide").stdout
    assert "rehearsal" in events, events

    # nothing left to rehearse on; and a trial that does not exist
    done = cli("trial", "preempt", trial, check=False)
    assert done.returncode == 1 and "has no running job" in done.stdout + done.stderr, done
    missing = cli("trial", "preempt", 999, check=False)
    assert missing.returncode == 1 and "no trial 999" in missing.stdout + missing.stderr
    whole = cli("experiment", "preempt", exp, check=False)
    assert whole.returncode == 1 and "has no running trial" in whole.stdout + whole.stderr
    assert "Traceback" not in done.stderr + missing.stderr + whole.stderr
