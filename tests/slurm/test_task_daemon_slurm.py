"""The daemon sees interactive tasks' jobs end (docs/interactive.md, "Who sees a task's
job end"): two ``cmd run --detach`` jobs on the dev cluster, one exiting 4 and one 0,
are polled in the daemon's one ``squeue`` a tick (no experiment open) and recorded
``failed``/``ended`` by their exit codes in the task rows, with no ``task list`` run;
then ``task list`` with a daemon running (its lock held) shows what the daemon
recorded without asking Slurm of them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlmodel import select

from dethpc.backends.slurm import SlurmBackend
from dethpc.common.runner import RecordingRunner
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.store.models import Task, TaskState

pytestmark = pytest.mark.timeout(300)


def cli(env: dict[str, str], *args: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=240,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{args}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_the_daemon_sees_a_tasks_end_in_its_one_squeue(tmp_path: Path, slurm_cluster: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "cluster.yaml").write_text(yaml.safe_dump({
        "backend": "slurm", "runs_root": str(home / "runs"), "python": sys.executable,
        "pools": {"default": {"partition": "debug", "slots_per_node": 1,
                              "cpus_per_slot": 1}}}))
    env = {**os.environ, "DETHPC_HOME": str(home),
           "DETHPC_CLUSTER_CONFIG": str(home / "cluster.yaml")}
    jobs = {}
    for code in (4, 0):
        out = cli(env, "cmd", "run", "--detach", "--", "bash", "-c",
                  f"sleep 3; exit {code}").stdout
        m = re.search(r"command task (\d+): Slurm job (\S+)", out)
        assert m, out
        jobs[code] = (int(m[1]), m[2])
    monkeypatch.setenv("DETHPC_HOME", str(home))
    store = Store()
    runner = RecordingRunner(timeout=30.0)
    daemon = Daemon(store, ClusterConfig(backend="slurm", runs_root=home / "runs",
                                         pools={"default": ResourcePool(name="default")}),
                    SlurmBackend(runner))

    def rows() -> dict[int, Task]:
        with store.session() as s:
            return {t.id or 0: t for t in s.exec(select(Task))}

    deadline, ticks = time.monotonic() + 180, 0
    while not all(t.state.is_terminal for t in rows().values()):
        assert time.monotonic() < deadline, f"the daemon saw no end: {rows()}"
        runner.calls.clear()
        stats = daemon.tick()
        ticks += 1
        assert stats.experiments == 0 and not stats.errors
        assert runner.count("squeue") == 1, runner.calls   # both tasks, one squeue
        time.sleep(0.5)
    got = rows()
    assert (got[jobs[4][0]].state, got[jobs[4][0]].message) == (TaskState.FAILED, "exit code 4")
    assert (got[jobs[0][0]].state, got[jobs[0][0]].message) == (TaskState.ENDED, "exit code 0")
    assert daemon.tasks.ended == 2 and ticks >= 1
    runner.calls.clear()
    daemon.tick()                       # nothing live: no Slurm command at all
    assert runner.calls == []

    # with a daemon running, `task list` shows what the daemon recorded: a job cancelled
    # behind dethpc's back stays listed as the row has it until the daemon's tick
    out = cli(env, "cmd", "run", "--detach", "--", "sleep", "120").stdout
    m = re.search(r"command task (\d+): Slurm job (\S+)", out)
    assert m, out
    task_id, ref = int(m[1]), m[2]
    subprocess.run(["scancel", ref], check=True, timeout=60)
    wait_gone(ref)
    lock = subprocess.Popen(      # a daemon of this user runs: its lock is held
        [sys.executable, "-c", "import sys\nfrom dethpc.control import service\n"
         "with service.daemon_lock() as held:\n    print(held, flush=True)\n"
         "    sys.stdin.read()\n"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    try:
        assert lock.stdout is not None and lock.stdout.readline().strip() == "True"
        assert listed(env)[task_id]["state"] in ("starting", "running")   # as recorded
        daemon.tick()
        assert listed(env)[task_id]["state"] == "failed"         # the daemon's record
    finally:
        assert lock.stdin is not None
        lock.stdin.close()
        lock.wait(timeout=30)


def listed(env: dict[str, str]) -> dict[int, dict[str, Any]]:
    return {t["id"]: t for t in json.loads(cli(env, "task", "list", "--all", "--json").stdout)}


def wait_gone(ref: str, timeout_s: float = 60) -> None:
    """Until ``squeue`` no longer lists job ``ref`` as pending or running."""
    deadline = time.monotonic() + timeout_s
    while subprocess.run(["squeue", "-h", "-t", "PD,R,CG", "-j", ref], capture_output=True,
                         text=True, timeout=60).stdout.strip():
        assert time.monotonic() < deadline, f"job {ref} is still in the queue"
        time.sleep(0.5)
