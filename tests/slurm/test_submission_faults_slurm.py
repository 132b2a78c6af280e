"""Issue 46 item 1 on the dev cluster: a daemon killed with ``kill -9`` between its
sbatch and its record of the job id (``DETHPC_FAULT_POINT=after_sbatch:<kind>``) leaves
no untracked job, for each kind of submission the daemon makes through the one protocol
(``dethpc.control.submission``): a trial batch's array, a worker pool's array, and an
image's pre-pull job. (``dethpc sbatch``'s kind: tests/slurm/test_sbatch_adopt_slurm.py.)

Each case submits an experiment without a daemon, runs one ``dethpc daemon tick`` that
the fault point SIGKILLs right after Slurm took the job, then ticks a new daemon (the
restart) until the experiment ends. Slurm (squeue and sacct) has exactly one job under
the name the dead daemon recorded, before and after the recovery; the store knows it
(the batch SUBMITTED with that job id and an ``adopted`` event, or the pre-pull record
holding it); the experiment COMPLETED; nothing was submitted again in its place, and
every job Slurm has under the home's runs directory is one the store knows. A pre-pull
job is adopted while it runs (it waits for the test's go-file), and also when it has
cached the image before a daemon ran again (``pull-ended``: the record used to stay a
name that no daemon resolved, beside a job nothing recorded).

Interactive tasks (``dethpc cmd run``, shell, notebook) and TensorBoard's ``--slurm``
job do not go through this protocol (``dethpc.surfaces.tasks``: the task row first,
then a plain backend submit, no fault points, no adoption): they are not cases here.

The pre-pull job runs the stand-in ``apptainer`` of tests/unit/jobs/test_containers.py
(the dev cluster has no network and no Apptainer, as in tests/slurm/test_pull_job_slurm.py):
the pull job, its record and the dependency are real, the image is not.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from dethpc.backends.base import JobState
from dethpc.common.jobref import base_job_id
from dethpc.common.kinds import EventKind
from dethpc.control.submission import SubmissionKind
from dethpc.jobs.imagepull import pull_job
from dethpc.store.models import Batch, BatchKind, BatchState
from tests.slurm.fixtures.harness import DaemonHarness, toy_context, wait_until
from tests.slurm.fixtures.standin_runtime import standin_pull_site

KINDS = (SubmissionKind.TRIALS, SubmissionKind.WORKERS, SubmissionKind.PULL)
IMAGE = "org/img:1"


def jobs_named(name: str) -> set[str]:
    """The job ids (an array's base id once) Slurm has under ``name``: live (squeue) or
    ended (sacct, the last two hours)."""
    live = subprocess.run(["squeue", "-h", "--states=all", f"--name={name}", "-o", "%i"],
                          capture_output=True, text=True, check=True).stdout.split()
    ended = subprocess.run(["sacct", "-n", "-P", "-X", f"--name={name}",
                            "--starttime=now-2hours", "-o", "JobID"],
                           capture_output=True, text=True, check=True).stdout.split()
    return {base_job_id(j.split("_[")[0].split("+")[0]) for j in (*live, *ended)}


def experiment(kind: SubmissionKind) -> dict[str, Any]:
    """Seconds of work: two toy trials (one array) for trials and workers, one trial in
    the stand-in image for a pull."""
    if kind is SubmissionKind.PULL:
        return {"name": "fault-pull", "entrypoint": "python3 -c pass",
                "searcher": {"name": "single", "metric": "loss",
                             "max_length": {"batches": 1}},
                "resources": {"resource_pool": "debug"}, "max_restarts": 0,
                "environment": {"image": IMAGE}}
    raw: dict[str, Any] = {
        "name": f"fault-{kind}", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6},
                            "step_time": 0.05},
        "searcher": {"name": "random", "metric": "validation_loss", "max_trials": 2,
                     "max_concurrent_trials": 2, "max_length": {"batches": 10}},
        "resources": {"resource_pool": "debug"}, "max_restarts": 0}
    if kind is SubmissionKind.WORKERS:
        raw["slurm"] = {"workers": {"preload": ["dethpc.core"], "heartbeat_s": 1,
                                    "lease_timeout_s": 30}}
    return raw


@pytest.fixture
def site(tmp_path: Path, slurm_cluster: Any,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[DaemonHarness]:
    """A daemon's home on the dev cluster; the stand-in runtime on the PATH its jobs
    inherit (used by the pull case only)."""
    monkeypatch.delenv("DETHPC_FAULT_POINT", raising=False)
    h, _ = standin_pull_site(tmp_path, monkeypatch)
    yield h
    h.cancel_all_experiments()


def killed_tick(h: DaemonHarness, kind: SubmissionKind) -> None:
    """One ``dethpc daemon tick`` over the harness's home, SIGKILLed after its sbatch."""
    env = {**os.environ, "DETHPC_HOME": str(h.root),
           "DETHPC_CLUSTER_CONFIG": str(h.root / "cluster.yaml"),
           "DETHPC_FAULT_POINT": f"after_sbatch:{kind}"}
    proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "daemon", "tick"],
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)


def batches(h: DaemonHarness, exp_id: int, kind: BatchKind) -> list[Batch]:
    with h.store.session() as s:
        rows = list(s.exec(select(Batch).where(Batch.experiment_id == exp_id,
                                               Batch.kind == kind)))
        for b in rows:
            s.expunge(b)
        return rows


def jobs_under(root: Path) -> dict[str, str]:
    """Every job Slurm has (live, or ended in the last two hours) whose working directory
    is under ``root``: the daemon's jobs of this test, known to its store or not. Job id
    (an array's base id) -> name."""
    live = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i|%j|%Z"],
                          capture_output=True, text=True, check=True).stdout
    ended = subprocess.run(["sacct", "-n", "-P", "-X", "--starttime=now-2hours",
                            "-o", "JobID,JobName,WorkDir"],
                           capture_output=True, text=True, check=True).stdout
    out: dict[str, str] = {}
    for line in (*live.splitlines(), *ended.splitlines()):
        jid, name, workdir = (line.split("|", 2) + ["", ""])[:3]
        if workdir == str(root) or workdir.startswith(f"{root}/"):
            out[base_job_id(jid.split("_[")[0])] = name
    return out


def state(h: DaemonHarness, jid: str) -> JobState:
    info = h.backend.poll([jid]).get(jid)
    return info.state if info is not None else JobState.UNKNOWN


def known_jobs(h: DaemonHarness, exp_id: int) -> set[str]:
    """The job ids the store (and the pre-pull record under runs_root) knows."""
    with h.store.session() as s:
        ids = {b.array_job_id for b in s.exec(select(Batch).where(
            Batch.experiment_id == exp_id)) if b.array_job_id}
    pulled = pull_job(h.cluster.runs_root, h.cluster.containers, IMAGE).job_id()
    return ids | ({pulled} if pulled else set())


#: (kind, whether its job has ended before the restart)
CASES = [(SubmissionKind.TRIALS, False), (SubmissionKind.WORKERS, False),
         (SubmissionKind.PULL, False), (SubmissionKind.PULL, True)]


@pytest.mark.parametrize(("kind", "ended"), CASES,
                         ids=[f"{k}{'-ended' if e else ''}" for k, e in CASES])
def test_daemon_killed_after_sbatch_leaves_one_tracked_job_and_the_work_completes(
        site: DaemonHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        kind: SubmissionKind, ended: bool) -> None:
    h = site
    go = Path(os.environ["STANDIN_DIR"]) / "go"
    if kind is SubmissionKind.PULL and not ended:
        monkeypatch.setenv("STANDIN_HOLD", "1")    # the pull runs until the test says go
    exp = h.submit(experiment(kind), context=toy_context(tmp_path))
    killed_tick(h, kind)
    pj = pull_job(h.cluster.runs_root, h.cluster.containers, IMAGE)
    batch_kind = BatchKind.WORKERS if kind is SubmissionKind.WORKERS else BatchKind.TRIALS
    # what the dead daemon recorded: the name, and no job id
    if kind is SubmissionKind.PULL:
        name = pj.submitting.read_text().strip()
        assert pj.job_id() is None and batches(h, exp, batch_kind) == []
    else:
        (batch,) = batches(h, exp, batch_kind)
        assert batch.state == BatchState.SUBMITTING and not batch.array_job_id
        name = batch.name
    # ... and what Slurm took before the kill: one job, under that name
    found = jobs_named(name)
    assert len(found) == 1, (name, found)
    (jid,) = found
    assert jobs_under(h.root) == {jid: name}
    try:
        if ended:       # the pull is done and its image cached before a daemon runs again
            wait_until(f"job {jid} to complete", lambda: state(h, jid) == JobState.COMPLETED,
                       timeout=120)
            assert list(Path(h.cluster.containers.sif_cache or "").glob("*.sif"))
        elif kind is SubmissionKind.PULL:
            h.wait(f"the pull job {jid} adopted", pj.job_id, timeout=60)
            assert not state(h, jid).is_terminal        # it waits for the go
            go.touch()
        done = h.wait_done(exp, timeout=300)
        assert done.state == "COMPLETED", h.events(exp)
        assert jobs_named(name) == {jid}           # adopted, never submitted again
        assert set(jobs_under(h.root)) == known_jobs(h, exp), (jobs_under(h.root),
                                                                h.events(exp))
        kinds = [k for k, _ in h.events(exp)]
        if kind is SubmissionKind.PULL:
            assert pj.job_id() == jid and not pj.submitting.exists()
            assert any("adopted after a restart" in m for k, m in h.events(exp)
                       if k == EventKind.PULL), h.events(exp)
            (trials,) = batches(h, exp, BatchKind.TRIALS)   # its one trial went out once
            assert trials.state == BatchState.SUBMITTED
        else:
            (batch,) = batches(h, exp, batch_kind)
            assert batch.state == BatchState.SUBMITTED and batch.array_job_id == jid
            assert kinds.count(EventKind.ADOPTED) == 1, h.events(exp)
            assert EventKind.ERROR not in kinds, h.events(exp)
        if kind is SubmissionKind.TRIALS:
            assert EventKind.SUBMITTED not in kinds, h.events(exp)
        if kind is SubmissionKind.WORKERS:
            assert batches(h, exp, BatchKind.TRIALS) == []   # its trials ran as items
        print(f"{kind}: job {jid} named {name} adopted; events {kinds}")
    finally:
        go.touch()
        subprocess.run(["scancel", jid], capture_output=True, check=False)
