"""Issue 46 item 1 on the dev cluster: a task's submitter (``dethpc cmd run``, ``shell
start``, ``notebook start``, ``tensorboard start --slurm``) killed with ``kill -9``
between its sbatch and its record of the job id (``DETHPC_FAULT_POINT=after_sbatch:<kind>``)
leaves a job that the next ``dethpc task list`` adopts: the task shows its job, ``task
kill`` cancels it, and Slurm has exactly one job under the task's name.

Before the one submission protocol, such a job ran as ``dethpc-<kind>-<id>`` with nothing
recording it, and the task (no job id, an empty host) stayed open in the list for ever
while ``task kill`` answered "runs on : run ... there". The CLI runs as a subprocess (its
own exit code and signal), on partition ``debug``; the jobs are real, and cancelled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.local.test_tensorboard_local import _world
from tests.slurm.fixtures.harness import wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def home(slurm_cluster: Any) -> Iterator[tuple[Path, int]]:
    """A home of its own (task ids start at 1) with one experiment for TensorBoard, and a
    cluster config whose default pool is partition ``debug``."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        for world in _world(monkeypatch):
            root = Path(world["home"])
            (root / "cluster.yaml").write_text(yaml.safe_dump({
                "backend": "slurm", "runs_root": str(root / "runs"),
                "python": sys.executable,
                "pools": {"default": {"partition": "debug", "slots_per_node": 1,
                                      "cpus_per_slot": 1}}}))
            yield root, int(world["exp"])


def cli(*args: object, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, **env},
                          timeout=240, stdin=subprocess.DEVNULL)


def squeue_named(name: str) -> dict[str, str]:
    """The user's live jobs named ``name``: job id -> comment."""
    out = subprocess.run(["squeue", "--me", "-h", f"--name={name}", "-o", "%i|%k"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if line)


def sacct_named(name: str, since: str) -> dict[str, str]:
    """The user's jobs named ``name`` that started since ``since``: job id -> state."""
    out = subprocess.run(["sacct", "-X", "-n", "-P", f"--name={name}", f"--starttime={since}",
                          "-o", "JobID,State"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if line)


START = {
    "command": lambda exp: ["cmd", "run", "--", "sleep", "600"],
    "shell": lambda exp: ["shell", "start"],
    "notebook": lambda exp: ["notebook", "start"],
    "tensorboard": lambda exp: ["tensorboard", "start", exp, "--slurm",
                                "--partition", "debug"],
}


@pytest.mark.parametrize("kind", list(START))
def test_a_task_submitter_killed_after_sbatch_its_job_is_adopted_and_killed(
        home: tuple[Path, int], kind: str) -> None:
    root, exp = home
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 2))
    killed = cli(*START[kind](exp), DETHPC_FAULT_POINT=f"after_sbatch:{kind}")
    assert killed.returncode == -signal.SIGKILL, (killed.stdout, killed.stderr)
    name = f"dethpc-{kind}-1"
    key = (root / "tasks" / "1" / "submitting").read_text()   # the record it left
    assert key.startswith("dethpc:task=1:")
    ours = [j for j, c in squeue_named(name).items() if c == key]
    try:
        assert len(ours) == 1, squeue_named(name)
        (jid,) = ours
        # the next command that looks at the task adopts the job: shown with its id
        listed = cli("task", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        (task,) = json.loads(listed.stdout)
        assert (task["id"], task["kind"], task["job"]) == (1, kind, jid), task
        assert task["state"] in ("starting", "running") and "adopted" in task["message"]
        assert not (root / "tasks" / "1" / "submitting").exists()
        # and `task kill` cancels it (the CLI's words unchanged)
        stopped = cli("task", "kill", 1)
        assert (stopped.returncode, stopped.stdout.strip()) == (0, "task 1 stopped"), stopped
        assert [j for j, c in squeue_named(name).items() if c == key] == []
        assert json.loads(cli("task", "list", "--json").stdout) == []
        # Slurm had exactly one job under the name: nothing submitted it twice
        wait_until(f"job {jid} cancelled in accounting",
                   lambda: sacct_named(name, since).get(jid, "").startswith("CANCELLED"),
                   timeout=60)
        assert list(sacct_named(name, since)) == [jid]
    finally:
        if ours:
            subprocess.run(["scancel", *ours], capture_output=True, check=False, timeout=60)


def test_a_left_command_whose_job_already_ended_is_adopted_and_ended(
        home: tuple[Path, int]) -> None:
    """The job of a ``cmd run`` killed after its sbatch ends before any command looks:
    slurmctld still answers for it with its comment (``squeue --states=all``, for
    ``MinJobAge``), so ``task list`` adopts it and ends the task by its exit code. (After
    that, where accounting keeps no comments, the job's log in the task's directory says
    it ran: the unit table's case, since waiting out MinJobAge here costs 5 minutes.)"""
    root, _ = home
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 2))
    killed = cli("cmd", "run", "--", "true", DETHPC_FAULT_POINT="after_sbatch:command")
    assert killed.returncode == -signal.SIGKILL, (killed.stdout, killed.stderr)
    key = (root / "tasks" / "1" / "submitting").read_text()
    (jid,) = [j for j, c in squeue_named("dethpc-command-1").items() if c == key]
    wait_until(f"job {jid} completed in accounting",
               lambda: sacct_named("dethpc-command-1", since).get(jid) == "COMPLETED",
               timeout=120)
    assert squeue_named("dethpc-command-1") == {}
    listed = cli("task", "list", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    (task,) = json.loads(listed.stdout)
    assert (task["job"], task["state"], task["message"]) == (jid, "ended", "exit code 0"), task
    assert not (root / "tasks" / "1" / "submitting").exists()
    assert list(sacct_named("dethpc-command-1", since)) == [jid]
