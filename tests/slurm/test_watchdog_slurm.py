"""Issue 35 item 1, the hang watchdog, on the dev cluster.

A trial whose first run stops in a ``time.sleep`` loop after a few steps (no metrics,
no heartbeat; its job stays RUNNING): the daemon declares it hung once it was idle
``slurm.watchdog.max_idle_s`` (15 s), asks its ranks for their stacks (they are in the
trial log), ends the job, counts a restart with reason ``hung``, and the next job
resumes from the last checkpoint and completes. And a 2x2 DDP trial one of whose ranks
is frozen (SIGSTOP): the others block in the next collective, their stacks show it.
Before the freeze the same trial proves issue 35 item 4: its rank 3 is slowed on purpose
(0.1 s more per batch), and ``describe`` names rank 3 and its node as the straggler.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dethpc.surfaces import views
from tests.slurm.fixtures.harness import DaemonHarness, job_log, read_jsonl, toy_context

#: release-agnostic, and run in the 25.11 lane only: that lane has room, Debian's three
#: have none (docs/testing.md, "Which release runs what")
pytestmark = [pytest.mark.slurm,
              pytest.mark.parametrize("slurm_release", ["25.11"], indirect=True,
                                      ids=["slurm-25.11"])]

MAX_IDLE_S = 15


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc")
    yield h
    h.cancel_all_experiments()


def test_a_trial_stuck_in_a_sleep_loop_is_ended_with_its_stacks_and_resumes(
        harness: DaemonHarness, tmp_path: Path) -> None:
    h = harness
    ctx = toy_context(tmp_path)
    exp = h.submit({
        "name": "hang", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": 3, "step_time": 0.2, "hang_at": 5, "save_every": 2},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 12}},
        "max_restarts": 2,
        "resources": {"resource_pool": "debug"},
        "slurm": {"watchdog": {"max_idle_s": MAX_IDLE_S}}}, context=ctx)
    ref = h.wait("the trial's job", lambda: h.job_ref(exp))
    trial_dir = h.trial_dir(exp)
    hung = h.wait("the watchdog to declare the trial hung", lambda: (
        trial_dir / "hung.json").exists() and json.loads((trial_dir / "hung.json").read_text()),
        timeout=240, story_of=exp)
    print(f"hung.json: {hung}")
    assert hung["job"] == ref and hung["run"] == 0 and hung["max_idle_s"] == MAX_IDLE_S
    # within max_idle plus about a tick (the harness ticks once a second; a loaded
    # machine's tick takes longer)
    assert MAX_IDLE_S <= hung["idle_s"] <= MAX_IDLE_S + 8, hung
    done = h.wait_done(exp, timeout=300)
    trial = h.trial(exp)
    assert done.state == "COMPLETED" and trial.restarts == 1, h.story(exp)
    assert trial.steps_completed == 12, h.story(exp)
    exits = read_jsonl(trial_dir / "exits.jsonl")
    # the daemon's record of the hung run, then the batch shell's own (its steps were
    # killed, it was not: it read hung.json), then the new job's
    assert [(e["reason"], e["job"]) for e in exits] == [
        ("hung", ref), ("hung", ref), ("completed", h.job_ref(exp))], h.story(exp)
    assert exits[1]["code"] == 137 and exits[1]["nodes"], exits
    log = job_log(trial_dir)
    # the stacks of the hung run, written by the trial process on the watchdog's signal
    assert "toy: hanging at step 5" in log, log[-3000:]
    dump = log[log.index("toy: hanging at step 5"):]
    assert "most recent call first" in dump and "train.py" in dump, dump[-3000:]
    assert "toy: resumed at step 4" in log, log[-3000:]
    events = h.events(exp)
    assert any(k == "hung" and "no progress for" in m for k, m in events), events


def proc_env(pid: int) -> dict[str, str]:
    """The environment process ``pid`` started with."""
    return dict(kv.split("=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes()
                .decode(errors="replace").split("\0") if "=" in kv)


def rank_pids(trial_dir: Path) -> dict[int, int]:
    """The trial's rank processes on this machine (the dev cluster's nodes are local):
    ``{RANK: pid}`` from each python's environment."""
    out: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = dict(kv.split("=", 1) for kv in
                       (proc / "environ").read_bytes().decode(errors="replace").split("\0")
                       if "=" in kv)
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if env.get("DETHPC_TRIAL_DIR") == str(trial_dir) and "RANK" in env \
                and any(c.endswith(b"train.py") for c in cmd):
            out[int(env["RANK"])] = int(proc.name)
    return out


@pytest.fixture
def harness_2x2(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc", slots_per_node=2)
    yield h
    h.cancel_all_experiments()


def test_a_ddp_trial_with_a_frozen_rank_is_ended_and_resumes(
        harness_2x2: DaemonHarness, tmp_path: Path) -> None:
    """A 2-node x 2-rank DDP trial (srun launcher): the test freezes rank 3's process
    (SIGSTOP, on the second node; the job and the other ranks go on), so the others
    block in the next collective and nothing is reported; the watchdog ends the job
    and the trial resumes from its latest checkpoint and completes."""
    import os
    import signal

    from tests.slurm.fixtures.harness import TRIAL_DIR, experiment_yaml

    h = harness_2x2
    batches = 120
    # rank 3 sleeps 0.1 s more per batch: the straggler describe must name
    raw = experiment_yaml(batches=batches, pool="debug",
                          hparams={"step_time": 0.1, "slow_rank": 3, "slow_s": 0.1})
    raw["entrypoint"] = ("python3 -m dethpc.launch.torch_distributed --mode srun -- "
                         f"python3 train.py --batches {batches}")
    raw["resources"] = {"resource_pool": "debug", "slots_per_trial": 4}
    raw["slurm"] = {"watchdog": {"max_idle_s": 20}}
    exp = h.submit(raw, context=TRIAL_DIR)
    ref = h.wait("the trial's job", lambda: h.job_ref(exp))
    trial_dir = h.trial_dir(exp)
    h.wait("two checkpoints", lambda: len(list(h.ckpt_dir(exp).glob("*"))) >= 2,
           timeout=300, story_of=exp)
    pids = h.wait("the 4 ranks", lambda: (lambda p: p if len(p) == 4 else None)(
        rank_pids(trial_dir)), timeout=60, story_of=exp)
    # issue 35 item 4: rank 3 (0.2 s of its own work a batch, the others 0.1 s) is
    # named with its node; without the per-rank step times there is no straggler
    node_of_3 = proc_env(pids[3]).get("SLURMD_NODENAME")
    slow = h.wait("describe to name the straggler", lambda: next(
        (t["straggler"] for t in views.describe_experiment(h.store, exp)["trials"]
         if t["straggler"]), None), timeout=120, story_of=exp)
    print(f"straggler: {slow}")
    assert slow["rank"] == 3 and slow["node"] == node_of_3 and slow["ranks"] == 4, slow
    os.kill(pids[3], signal.SIGSTOP)
    hung = h.wait("the watchdog to declare the trial hung", lambda: (
        trial_dir / "hung.json").exists() and json.loads((trial_dir / "hung.json").read_text()),
        timeout=240, story_of=exp)
    print(f"hung.json: {hung}")
    assert hung["job"] == ref and 20 <= hung["idle_s"] <= 20 + 8, hung
    done = h.wait_done(exp, timeout=400)
    trial = h.trial(exp)
    assert done.state == "COMPLETED" and trial.restarts == 1, h.story(exp)
    assert trial.steps_completed == batches, h.story(exp)
    exits = read_jsonl(trial_dir / "exits.jsonl")
    assert [e["reason"] for e in exits if e["job"] == ref] == ["hung", "hung"], exits
    log = (trial_dir / f"slurm-{ref}.out").read_text()
    # the ranks that were not frozen wrote their stacks (the frozen one cannot)
    assert log.count("most recent call first") >= 2, log[-4000:]
    # the hung run wrote no record (its steps were killed); the next job's 4 ranks
    # resumed together from the latest checkpoint, not from the start, and finished
    runs = read_jsonl(trial_dir / "runs.jsonl")
    assert len(runs) == 4 and len({r["first_batch"] for r in runs}) == 1, runs
    assert runs[0]["first_batch"] > 10 and {r["batches_done"] for r in runs} == {batches}, runs
