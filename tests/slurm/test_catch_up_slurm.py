"""A view with no daemon running is right anyway (issue 32 item 2): jobs submitted by
``dethpc sbatch --no-daemon`` end in Slurm while nothing tracks them; ``dethpc
experiment describe``/``list`` then read their ends from Slurm (one squeue, one sacct
for those that left the queue) and judge them as the daemon would, and say that no
daemon runs while something is still open. With ``DETHPC_CATCH_UP=0`` (what the rest
of the suite runs under) the same views show the stale state and say so: the
difference is this feature.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dethpc.control.daemon import Daemon
from dethpc.store import Store
from tests.slurm.fixtures.harness import wait_until
from tests.slurm.fixtures.sbatch_kit import (
    dethpc_sbatch,
    env_for,
    experiment_of_job,
    sacct,
    sbatch_home,
)

#: release-agnostic, and run in the 25.11 lane only: that lane has room, Debian's three
#: have none (docs/testing.md, "Which release runs what")
pytestmark = [pytest.mark.parametrize("slurm_release", ["25.11"], indirect=True,
                                      ids=["slurm-25.11"])]


@pytest.fixture
def home(tmp_path: Path, slurm_cluster: Any) -> Iterator[tuple[Path, Store, Daemon]]:
    with sbatch_home(tmp_path) as made:
        yield made


def view(root: Path, *args: str, catch_up: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "experiment",
                           *args], env=env_for(root, DETHPC_CATCH_UP="1" if catch_up else "0"),
                          capture_output=True, text=True, timeout=120)


def submit(root: Path, work: Path, body: str, minutes: int = 2) -> str:
    script = work / f"job{len(list(work.glob('*.sh')))}.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH -p debug\n#SBATCH -t {minutes}\n{body}\n")
    proc = dethpc_sbatch(root, work, "--parsable", script.name)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_describe_reads_the_ends_from_slurm_when_no_daemon_runs(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    root, store, _ = home            # the fixture's daemon is never ticked here
    work = tmp_path / "work"
    work.mkdir()
    ok, bad = submit(root, work, "echo fine"), submit(root, work, "exit 4")
    # still running when the views read it: under CI's load the views below took more
    # than the 2 minutes the others have (f28: the held job ended TIMEOUT meanwhile)
    held = submit(root, work, "sleep 600", minutes=30)
    for job in (ok, bad):
        wait_until(f"job {job} to end in accounting",
                   lambda j=job: set(sacct(j, "State")) & {"COMPLETED", "FAILED"},  # type: ignore[misc]
                   timeout=120)
    wait_until(f"job {held} to run", lambda: sacct(held, "State") == ["RUNNING"], timeout=120)
    ids = {job: experiment_of_job(store, job) for job in (ok, bad, held)}

    # the store as dethpc sbatch left it: nothing tracked the jobs
    stale = view(root, "describe", str(ids[ok]), "--json", catch_up=False)
    assert stale.returncode == 0, stale.stderr
    assert json.loads(stale.stdout)["state"] == "ACTIVE"
    assert "no dethpc daemon is running" in stale.stderr and "not being updated" in \
        stale.stderr, stale.stderr

    # the same view, reading Slurm: each end is judged as the daemon judges it
    states = {}
    for job, exp_id in ids.items():
        got = view(root, "describe", str(exp_id), "--json", catch_up=True)
        assert got.returncode == 0, got.stderr
        d = json.loads(got.stdout)
        states[job] = (d["state"], [t["state"] for t in d["trials"]])
    assert states == {ok: ("COMPLETED", ["COMPLETED"]), bad: ("ERROR", ["ERROR"]),
                      held: ("ACTIVE", ["RUNNING"])}, states
    listed = view(root, "list", "--json", catch_up=True)
    assert listed.returncode == 0, listed.stderr
    assert {r["id"]: r["state"] for r in json.loads(listed.stdout)} == {
        ids[ok]: "COMPLETED", ids[bad]: "ERROR", ids[held]: "ACTIVE"}
    # still open: the view says that it read Slurm and that nothing new is submitted
    assert "read from Slurm just now" in listed.stderr, listed.stderr
    assert "dethpc daemon start" in listed.stderr


def test_wait_ends_with_the_job_when_no_daemon_runs(home: tuple[Path, Store, Daemon],
                                                    tmp_path: Path) -> None:
    """``dethpc experiment wait`` on a ``dethpc sbatch --no-daemon`` job: it says once
    that no daemon runs, looks at Slurm every few seconds, and returns when the job
    ends; without the reading it would wait for ever (it times out, having said why)."""
    root, store, _ = home
    work = tmp_path / "work"
    work.mkdir()
    # the job runs until the test lets it end: still running at both first looks, on
    # any machine (f28, loaded: a `sleep 40` ended before the second `wait` looked)
    hold = work / "hold"
    hold.touch()
    job = submit(root, work, f"while [ -e {hold} ]; do sleep 0.5; done", minutes=10)
    exp_id = str(experiment_of_job(store, job))
    stale = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "experiment",
                            "wait", exp_id, "--timeout", "2"],
                           env=env_for(root, DETHPC_CATCH_UP="0"), capture_output=True,
                           text=True, timeout=120)
    assert stale.returncode != 0 and "still ACTIVE" in stale.stderr, stale
    assert "not being updated" in stale.stderr, stale.stderr
    waiting = subprocess.Popen([sys.executable, "-m", "dethpc.surfaces.cli.main", "experiment",
                                "wait", exp_id, "--timeout", "180"],
                               env=env_for(root, DETHPC_CATCH_UP="1"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert waiting.stderr is not None
        said = ""                             # what it says while the job still runs
        while "no dethpc daemon is running" not in said:
            line = waiting.stderr.readline()
            if not line:
                break                             # it ended without saying it: fails below
            said += line
        hold.unlink()
        out, rest = waiting.communicate(timeout=240)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, (out, said + rest)
    assert f"experiment {exp_id}: COMPLETED" in out
    assert "no dethpc daemon is running" in said + rest, said + rest
