"""``dethpc sbatch`` without Slurm, and the daemon's side of a submission in flight.

- On the local backend the plain command is refused with a clear message and a
  non-zero exit, and nothing is recorded (a search is what the local backend runs).
- A ``dethpc sbatch`` batch recorded but not yet confirmed (its submitter holds the
  lock, as while sbatch runs) is left alone by the daemon's recovery; once the
  submitter is gone without a job id, its trial ends ERROR and the experiment too,
  and the daemon never submits a job for it. Real store, real daemon, real lock.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqlmodel import select

from dethpc.backends.local import LocalBackend
from dethpc.config import load_cluster_config
from dethpc.control import submitters
from dethpc.control.daemon import Daemon, TickStats
from dethpc.store import Store
from dethpc.store.models import Batch, BatchState, Experiment, ExperimentState, Trial, TrialState
from dethpc.surfaces.sbatchwrap import plain
from dethpc.surfaces.sbatchwrap.search_cli import parse_command

REPO = Path(__file__).resolve().parents[2]


def test_local_backend_refuses_plain_sbatch(home: Path, tmp_path: Path) -> None:
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH -t 1\necho hi\n")
    proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "sbatch", "job.sh"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode != 0
    assert "backend is local" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (home / "runs").exists() or not list((home / "runs").iterdir())


def test_daemon_leaves_a_submission_in_flight_and_fails_an_abandoned_one(
        home: Path, tmp_path: Path) -> None:
    cluster = load_cluster_config(home / "cluster.yaml")
    store = Store(f"sqlite:///{home / 'dethpc.db'}")
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH --array=0-2\necho hi\n")
    job = plain.plan(parse_command(["job.sh"]), cluster, cwd=tmp_path, environ={},
                     stdin_text=None)
    daemon = Daemon(store, cluster, LocalBackend(tmp_path / "spool"))

    def states() -> tuple[BatchState, list[TrialState], ExperimentState]:
        with store.session() as s:
            (batch,) = s.exec(select(Batch))
            (exp,) = s.exec(select(Experiment))
            return batch.state, [t.state for t in s.exec(select(Trial))], exp.state

    with submitters.submitting(Path(cluster.runs_root)) as token:
        rec = plain.record(store, cluster, job, token=token, owner="me",
                           python=sys.executable)
        assert len(rec.trials) == 3
        daemon.adopt(TickStats())
        assert states() == (BatchState.SUBMITTING, [TrialState.QUEUED] * 3,
                            ExperimentState.ACTIVE)
    # the submitter is gone (lock released, no job id): the daemon ends it
    daemon.adopt(TickStats())
    assert states() == (BatchState.FAILED, [TrialState.ERROR] * 3, ExperimentState.ERROR)
    assert daemon.submit_experiment(rec.experiment_id) == 0
    with store.session() as s:
        exp = s.get(Experiment, rec.experiment_id)
        assert exp is not None and "untracked" in exp.message
