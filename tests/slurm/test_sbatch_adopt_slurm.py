"""Issue 46 item 1 on the dev cluster: ``dethpc sbatch`` killed with ``kill -9`` between
its sbatch and its record of the job id (``DETHPC_FAULT_POINT=after_sbatch:sbatch``)
leaves a running job that the next daemon adopts, and its trial completes.

Before the one submission protocol, the daemon saw the record SUBMITTING with the
submitter's lock free and ended the trial ERROR while the job ran on untracked (its
name is the user's, which nothing could adopt it by). Now the job goes out with
dethpc's ``--comment`` key beside the user's unchanged name, and the daemon finds it by
the two: a job of the same name that the user submitted with plain sbatch is not taken.
The job waits for a file the test writes after the adoption, so it is running when
adopted (no sleep races a timer). Both submitters are killed: the light path's, which
records with ``sqlite3`` (``dethpc.store.sbatch_rows``), and the ORM's
(``DETHPC_FAST_SBATCH=0``).
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from dethpc.common.kinds import EventKind
from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.store.models import Batch, BatchState, Event, Experiment, Job
from tests.slurm.fixtures.harness import wait_until
from tests.slurm.fixtures.sbatch_kit import dethpc_sbatch, job_field, sbatch_home, tick_until

#: waits (at most 4 minutes) for the test's go-file, then ends 0
SCRIPT = """#!/bin/bash
#SBATCH --partition=debug
#SBATCH --time=5
#SBATCH --output=out-%j.txt
for _ in $(seq 1200); do [ -e go ] && break; sleep 0.2; done
[ -e go ] && echo finished
"""


@pytest.fixture
def home(tmp_path: Path, slurm_cluster: Any) -> Iterator[tuple[Path, Store, Daemon]]:
    with sbatch_home(tmp_path) as made:
        yield made


def squeue_named(name: str) -> dict[str, str]:
    """The user's live jobs named ``name``: job id -> comment."""
    out = subprocess.run(["squeue", "--me", "-h", f"--name={name}", "-o", "%i|%k"],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if line)


@pytest.mark.parametrize("fast", ["1", "0"], ids=["sqlite3 path", "ORM path"])
def test_submitter_killed_after_sbatch_its_job_is_adopted_and_completes(
        home: tuple[Path, Store, Daemon], tmp_path: Path, fast: str) -> None:
    root, store, daemon = home
    work = tmp_path / "project"
    work.mkdir()
    (work / "job.sh").write_text(SCRIPT)
    # the user's own job of the same name, submitted with plain sbatch
    decoy = subprocess.run(["sbatch", "--parsable", "job.sh"], cwd=work, capture_output=True,
                           text=True, check=True).stdout.strip().split(";")[0]
    try:
        killed = dethpc_sbatch(root, work, "job.sh", DETHPC_FAULT_POINT="after_sbatch:sbatch",
                               DETHPC_FAST_SBATCH=fast)
        assert killed.returncode == -signal.SIGKILL, (killed.stdout, killed.stderr)
        assert killed.stdout == ""                      # it died before printing the id
        with store.session() as s:
            (exp,) = s.exec(select(Experiment))
            (batch,) = s.exec(select(Batch))
            assert batch.state == BatchState.SUBMITTING and exp.id is not None
            exp_id = exp.id
        # Slurm has two jobs named job.sh: the user's, and dethpc's with its key
        named = squeue_named("job.sh")
        ours = [j for j, c in named.items() if c.startswith(f"dethpc:exp={exp_id}:")]
        assert set(named) - set(ours) == {decoy} and len(ours) == 1, named
        (jid,) = ours
        assert job_field(jid, "JobName") == "job.sh"  # the user's name, unchanged
        wait_until(f"job {jid} running", lambda: job_field(jid, "JobState") == "RUNNING",
                   timeout=120)
        # the next daemon: adopts the running job (not the decoy) in its recover phase
        stats = daemon.tick()
        assert not stats.errors, stats.errors
        with store.session() as s:
            refs = [j.ref for j in s.exec(select(Job).where(Job.experiment_id == exp_id))]
            kinds = [e.kind for e in s.exec(select(Event).where(
                Event.experiment_id == exp_id))]
            (batch,) = s.exec(select(Batch))
        assert refs == [jid] and batch.state == BatchState.SUBMITTED
        assert EventKind.ADOPTED in kinds and EventKind.ERROR not in kinds, kinds
        assert job_field(jid, "JobState") == "RUNNING"
        (work / "go").touch()
        d = tick_until(store, daemon, exp_id, timeout=180)
        assert d["state"] == "COMPLETED", d
        assert [t["state"] for t in d["trials"]] == ["COMPLETED"]
        assert (work / f"out-{jid}.txt").read_text().strip().endswith("finished")
    finally:
        (work / "go").touch()
        subprocess.run(["scancel", decoy], capture_output=True, check=False)
