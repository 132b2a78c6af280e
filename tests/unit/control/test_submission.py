"""The one submission protocol (``dethpc.control.submission``): a kill -9 at every fault
point of every kind of submission leaves no job the next daemon does not know, and none
submitted twice. Each case submits in a forked child told to die at one point
(``DETHPC_FAULT_POINT=<point>:<kind>``), then a new ``Submission`` (the restarted
daemon) adopts what the child left unconfirmed; the jobs are the local backend's real
spool, the records a real SQLite store and real files."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlmodel import select

from dethpc.backends.base import JobInfo, JobRequest, JobState
from dethpc.backends.local import LocalBackend
from dethpc.common.errors import DethpcError, SubmitError, SubmitLimitError
from dethpc.control.daemon.pulls import PullLedger
from dethpc.control.submission import (
    BatchLedger,
    Ledger,
    Submission,
    SubmissionKind,
    adopt,
    record_batch,
)
from dethpc.control.submitters import submitting, unconfirmed
from dethpc.jobs.imagepull import PullJob
from dethpc.store import Store
from dethpc.store.models import (
    Batch,
    BatchKind,
    BatchState,
    Event,
    Experiment,
    ExperimentState,
    Job,
    Task,
    TaskKind,
    TaskState,
    Trial,
    TrialState,
)
from dethpc.store.new_experiment import SqliteAtHead
from dethpc.surfaces.sbatchwrap import plain
from dethpc.surfaces.sbatchwrap.search_cli import parse_command
from dethpc.surfaces.tasks import ledger, registry
from tests.unit.control.daemon_kit import Recorder, World, world

POINTS = ("after_record", "after_sbatch", "after_confirm")


class Policy:
    """The budget's side of a refusal, recorded."""

    def __init__(self) -> None:
        self.refusals: list[tuple[int, int, str]] = []
        self.successes = 0

    def refusal(self, exp_id: int, size: int, exc: SubmitLimitError) -> None:
        self.refusals.append((exp_id, size, exc.word))

    def succeeded(self) -> None:
        self.successes += 1


def script(tmp_path: Path) -> Path:
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/bash\ntrue\n")
    return path


# ------------------------------------------------------------------ the kinds
def batch_ledger(w: World, kind: BatchKind) -> Callable[[Store], tuple[Ledger, JobRequest]]:
    """Records a batch of 2 (trials, or pool workers) and returns its ledger and request."""
    trials = w.add_trials(2, needs_job=True) if kind == BatchKind.TRIALS else []

    def make(store: Store) -> tuple[Ledger, JobRequest]:
        batch = record_batch(store, w.exp_id, "default", kind, lambda b: f"dethpc-e1-b{b}",
                             trials=trials, size=2)
        return BatchLedger(store, batch), JobRequest(
            name=batch.name, comment="", script=script(w.store_dir), workdir=w.store_dir,
            array_indices=(0, 1))
    return make


def unconfirmed_batches(store: Store) -> list[Ledger]:
    with store.session() as s:
        return [BatchLedger(store, b) for b in s.exec(select(Batch).where(
            Batch.state == BatchState.SUBMITTING))]


# ------------------------------------------------------------------ the proof
def die_at(point: str, kind: SubmissionKind, store_url: str, spool: Path,
           make: Callable[[Store], tuple[Ledger, JobRequest]]) -> None:
    """Submit in a forked child that is SIGKILLed at ``point``."""
    pid = os.fork()
    if pid == 0:   # the child: a daemon of its own (its own store engine)
        try:
            os.environ["DETHPC_FAULT_POINT"] = f"{point}:{kind}"
            store = Store(store_url)
            ledger, request = make(store)
            Submission(LocalBackend(spool), Policy()).submit(ledger, request)
        finally:
            os._exit(3)    # reached only when the fault point did not fire
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("kind", [BatchKind.TRIALS, BatchKind.WORKERS])
def test_a_kill_at_any_point_leaves_no_untracked_job(tmp_path: Path, kind: BatchKind,
                                                     point: str) -> None:
    w = world(tmp_path)
    w.store_dir = tmp_path  # type: ignore[attr-defined]
    spool = tmp_path / "spool"
    url = str(w.store.engine.url)
    sk = SubmissionKind.WORKERS if kind == BatchKind.WORKERS else SubmissionKind.TRIALS
    die_at(point, sk, url, spool, batch_ledger(w, kind))
    backend = LocalBackend(spool)
    spooled = {i.ref for i in backend.find([f"dethpc-e1-b{b}" for b in range(1, 10)])}
    # the restarted daemon: what the dead one left unconfirmed, adopted or given back
    adopted = Submission(backend, Policy()).adopt(unconfirmed_batches(w.store))
    assert adopted == (1 if point == "after_sbatch" else 0)
    assert unconfirmed_batches(w.store) == []
    with w.store.session() as s:
        (batch,) = s.exec(select(Batch).where(Batch.kind == kind))
        jobs = list(s.exec(select(Job).where(Job.batch_id == batch.id)))
        trials = list(s.exec(select(Trial).where(Trial.experiment_id == w.exp_id)))
    if point == "after_record":       # nothing reached the backend: the work goes back
        assert spooled == set() and batch.state == BatchState.FAILED and jobs == []
        assert all(t.needs_job for t in trials)
        return
    # the backend's jobs are exactly the batch's, each once
    assert batch.state == BatchState.SUBMITTED and len(spooled) == 2
    assert batch.array_job_id and spooled == {f"{batch.array_job_id}_{i}" for i in (0, 1)}
    if kind == BatchKind.TRIALS:
        assert sorted(j.ref or "" for j in jobs) == sorted(spooled)
        assert not any(t.needs_job for t in trials)
    assert w.events("adopted" if point == "after_sbatch" else
                    ("submitted" if kind == BatchKind.TRIALS else "workers"))


def test_a_refusal_gives_the_work_back_and_asks_the_policy(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.store_dir = tmp_path  # type: ignore[attr-defined]
    ledger, request = batch_ledger(w, BatchKind.TRIALS)(w.store)
    w.backend.submit_errors = [SubmitLimitError("QOSMaxSubmitJobPerUserLimit", "no")]
    policy = Policy()
    assert Submission(w.backend, policy).submit(ledger, request) == []
    assert policy.refusals == [(w.exp_id, 2, "QOSMaxSubmitJobPerUserLimit")]
    assert policy.successes == 0
    with w.store.session() as s:
        assert [b.state for b in s.exec(select(Batch))] == [BatchState.FAILED]
    assert all(t.needs_job for t in w.trials())


# ------------------------------------------------------------------ image pre-pulls
@pytest.mark.parametrize("point", POINTS)
def test_a_kill_around_a_pre_pull_leaves_no_untracked_job(tmp_path: Path, point: str) -> None:
    """Before the one protocol, a pre-pull job's id was recorded only after its sbatch:
    a kill between the two left a job the next daemon did not know, and it submitted the
    image's pull again. Now its name is recorded first and the next daemon adopts it."""
    w = world(tmp_path)
    spool = tmp_path / "spool"
    pj = PullJob(tmp_path / "pulls", "train_1")
    name = "dethpc-pull-t-train_1"

    def make(store: Store) -> tuple[Ledger, JobRequest]:
        ledger = PullLedger(store, pj, "docker://train:1", w.exp_id, name)
        ledger.record()
        return ledger, JobRequest(name=name, comment="", script=script(tmp_path),
                                  workdir=tmp_path)

    die_at(point, SubmissionKind.PULL, str(w.store.engine.url), spool, make)
    backend = LocalBackend(spool)
    spooled = [i.ref for i in backend.find([name])]
    unconfirmed = ([PullLedger(w.store, pj, "docker://train:1", w.exp_id, name)]
                   if pj.submitting.is_file() else [])
    assert adopt(backend, unconfirmed) == (1 if point == "after_sbatch" else 0)
    assert not pj.submitting.exists()
    if point == "after_record":
        assert spooled == [] and pj.job_id() is None     # the next tick submits it
    else:
        assert spooled == [pj.job_id()]                  # known, once


# ------------------------------------------------------------------ dethpc sbatch
@pytest.mark.parametrize("records", ["models", "sqlite3"])
@pytest.mark.parametrize("point", POINTS)
def test_a_kill_around_dethpc_sbatch_leaves_no_untracked_job(tmp_path: Path, point: str,
                                                             records: str) -> None:
    """Before the one protocol, a ``dethpc sbatch`` killed between its sbatch and its
    record left a running job whose trial the daemon marked ERROR: the job carries the
    user's name, which nothing could adopt it by. Now it goes out with dethpc's
    ``--comment`` as well, and the restarted daemon adopts it by name and comment, not
    the user's other job of that name. The local backend's spool stands in for sbatch.
    ``records``: the submitter writes through the models (a ``Store``), or with ``sqlite3``
    alone (``SqliteAtHead``: the console entry's light path on a store at head)."""
    w = world(tmp_path)
    spool = tmp_path / "spool"
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH --array=3,5\ntrue\n")
    job = plain.plan(parse_command(["job.sh"]), w.cluster, cwd=tmp_path, environ={},
                     stdin_text=None)
    assert job.name == "job.sh"
    # the user's own job of the same name, submitted with plain sbatch
    decoy = LocalBackend(spool).submit(JobRequest(name="job.sh", comment="",
                                                  script=script(tmp_path), workdir=tmp_path))

    def child(store: Store | SqliteAtHead) -> None:
        """The submitter: holds its lock (released when it dies), records, submits."""
        token = submitting(w.cluster.runs_root).__enter__()
        rec = plain.record(store, w.cluster, job, token=token, owner="me",
                           python="python3")
        ledger = plain.SubmitterLedger(store, rec, job, "sbatch:" + token)
        request = JobRequest(name=job.name, comment=ledger.comment, script=script(tmp_path),
                             workdir=tmp_path, array_indices=job.indices)
        plain.send(ledger, plain.UserAnswers(), lambda: LocalBackend(spool).submit(request))

    pid = os.fork()
    if pid == 0:
        try:
            os.environ["DETHPC_FAULT_POINT"] = f"{point}:{SubmissionKind.SBATCH}"
            url = str(w.store.engine.url)
            quick = SqliteAtHead.open(url)     # the store is at head: never None here
            assert quick is not None
            child(Store(url) if records == "models" else quick)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    backend = LocalBackend(spool)
    spooled = {i.ref for i in backend.find(["job.sh"])} - set(decoy)
    # the restarted daemon's recover phase: the dead submitter's record, adopted or ended
    with w.store.session() as s:
        pending = list(s.exec(select(Batch).where(Batch.state == BatchState.SUBMITTING)))
        theirs, ledgers = unconfirmed(s, w.store, pending, w.cluster.runs_root)
    assert len(theirs) == len(ledgers) == (0 if point == "after_confirm" else 1)
    assert adopt(backend, ledgers) == (1 if point == "after_sbatch" else 0)
    with w.store.session() as s:
        (exp,) = s.exec(select(Experiment).where(Experiment.id != w.exp_id))
        (batch,) = s.exec(select(Batch).where(Batch.experiment_id == exp.id))
        jobs = list(s.exec(select(Job).where(Job.batch_id == batch.id)))
        trials = list(s.exec(select(Trial).where(Trial.experiment_id == exp.id)))
        events = [e.kind for e in s.exec(select(Event).where(Event.experiment_id == exp.id))]
    if point == "after_record":       # sbatch never ran: nothing runs, the record says so
        assert spooled == set() and jobs == []
        assert batch.state == BatchState.FAILED and exp.state == ExperimentState.ERROR
        assert [t.state for t in trials] == [TrialState.ERROR] * 2
        assert "sbatch did not submit it" in exp.message
        return
    # the job is tracked, once, with its tasks' own ids; the decoy is not taken
    assert batch.state == BatchState.SUBMITTED and exp.state == ExperimentState.ACTIVE
    assert batch.array_job_id and spooled == {f"{batch.array_job_id}_{i}" for i in (3, 5)}
    assert sorted(j.ref or "" for j in jobs) == sorted(spooled)
    assert {t.request_id: t.state for t in trials} == {3: TrialState.QUEUED,
                                                        5: TrialState.QUEUED}
    assert ("adopted" if point == "after_sbatch" else "submitted") in events


# ------------------------------------------------------------------ a task's job
TASK_KINDS = (TaskKind.COMMAND, TaskKind.SHELL, TaskKind.NOTEBOOK, TaskKind.TENSORBOARD)


def only_task(store: Store) -> Task:
    with store.session() as s:
        (task,) = s.exec(select(Task))
        return task


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("kind", TASK_KINDS)
def test_a_kill_around_a_tasks_job_leaves_no_untracked_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: TaskKind, point: str) -> None:
    """Before the one protocol, a shell's, notebook's, command's or TensorBoard's job was
    submitted after its task row and its id written after the sbatch: a kill between the
    two left a job ``dethpc-<kind>-<id>`` that nothing recorded, and a task without a job
    id or a host that stayed open for ever. Now the row is the record (its submitter
    holds its ``submitting`` file), and the next command that lists the tasks adopts the
    job by name and comment, not another home's job of the same name, or fails the task
    when sbatch never took it."""
    monkeypatch.setenv("DETHPC_HOME", str(tmp_path / "home"))
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    spool = tmp_path / "spool"
    # another home's task 1 of this kind: the same name, its own comment
    decoy = LocalBackend(spool).submit(JobRequest(
        name=ledger.job_name(kind, 1), comment="dethpc:task=1:0ther0ne",
        script=script(tmp_path), workdir=tmp_path))
    pid = os.fork()
    if pid == 0:   # the submitter (`dethpc cmd run`, ...): its own store engine
        try:
            os.environ["DETHPC_FAULT_POINT"] = f"{point}:{kind.value}"
            child = Store(str(store.engine.url))
            task, record = ledger.record(child, kind, [], 0.0, registry.task_dir)
            ledger.send(record, LocalBackend(spool), JobRequest(
                name=record.name, comment=record.comment, script=script(tmp_path),
                workdir=tmp_path))
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    task = only_task(store)
    assert task.id == 1
    spooled = {i.ref for i in LocalBackend(spool).find([ledger.job_name(kind, 1)])}
    spooled -= set(decoy)
    # the next command that looks (`dethpc task list`): adopted, failed, or left alone
    changed = ledger.adopt_left(store, [task], lambda: LocalBackend(spool))
    assert changed == (0 if point == "after_confirm" else 1)
    task = only_task(store)
    assert not (Path(task.work_dir) / ledger.SUBMITTING).exists()
    assert ledger.left(store, [task]) == []
    if point == "after_record":     # sbatch never ran: the task says so, nothing runs
        assert spooled == set() and task.job_ref == ""
        assert task.state == TaskState.FAILED and "sbatch did not submit it" in task.message
        return
    (ref,) = spooled                # the task has its job, once; the decoy is not taken
    assert task.job_ref == ref and task.state == TaskState.STARTING and task.host == ""
    assert ("adopted" in task.message) == (point == "after_sbatch")


def test_a_task_being_submitted_is_left_to_its_live_submitter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record whose submitter still runs (its lock held) is alive, not adopted: a
    ``task list`` at that instant neither fails it nor takes its job."""
    monkeypatch.setenv("DETHPC_HOME", str(tmp_path / "home"))
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    task, record = ledger.record(store, TaskKind.COMMAND, [], 0.0, registry.task_dir)
    assert ledger.submitting(task) is True and registry.alive(task) is True
    assert ledger.adopt_left(store, [task], lambda: LocalBackend(tmp_path / "s")) == 0
    record.release()                # the submitter died: the record is left
    assert ledger.submitting(task) is False and registry.alive(task) is None
    assert len(ledger.left(store, [task])) == 1


def test_a_refused_or_unclear_task_submission_fails_the_task(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal, over a limit or not, is the user's answer (the task FAILED with sbatch's
    words, nothing waits, Slurm not asked again); an error that leaves it unclear whether
    Slurm took the job is settled at once by asking Slurm by name: here it has none, and
    the task fails the same way."""
    monkeypatch.setenv("DETHPC_HOME", str(tmp_path / "home"))
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    backend = Recorder(tmp_path / "spool")
    backend.submit_errors = [SubmitLimitError("QOSMaxSubmitJobPerUserLimit", "too many"),
                             DethpcError("sbatch timed out"),
                             SubmitError("sbatch refused the job: invalid partition")]
    for expected in ("QOSMaxSubmitJobPerUserLimit", "sbatch timed out", "invalid partition"):
        task, record = ledger.record(store, TaskKind.SHELL, [], 0.0, registry.task_dir)
        with pytest.raises(DethpcError, match=f"sbatch refused the shell job: .*{expected}"):
            ledger.send(record, backend, JobRequest(
                name=record.name, comment=record.comment, script=script(tmp_path),
                workdir=tmp_path))
        task = registry.get(store, task.id or 0)
        assert task.state == TaskState.FAILED and expected in task.message
        assert ledger.submitting(task) is None
        assert not (Path(task.work_dir) / ledger.SUBMITTING).exists()
    # only the unclear answer asks Slurm for the job; a refusal is sbatch's last word
    assert backend.names() == ["submit", "submit", "find", "submit"]


@pytest.mark.parametrize(("code", "state"), [("0", TaskState.ENDED), ("3", TaskState.FAILED),
                                             (None, TaskState.FAILED)])
def test_a_left_task_whose_job_ran_and_left_the_queue_ends_by_its_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str | None,
        state: TaskState) -> None:
    """Where Slurm's accounting keeps no comments (no ``AccountingStoreFlags=job_comment``),
    a job that left the queue before its dead submitter's record was adopted is listed by
    sacct under its name without the key: not this task's for sure. Its log in the task's
    directory says it ran: the task ends by the exit code its script wrote, not FAILED
    as never submitted."""
    monkeypatch.setenv("DETHPC_HOME", str(tmp_path / "home"))
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    task, record = ledger.record(store, TaskKind.COMMAND, [], 0.0, registry.task_dir)
    record.release()                # the submitter died after its sbatch
    work = Path(task.work_dir)
    (work / "job.log").write_text("output\n")
    if code is not None:
        (work / "exit-code").write_text(code + "\n")
    backend = Recorder(tmp_path / "spool")
    backend.found = [JobInfo(ref="77", state=JobState.COMPLETED, name=record.name)]
    assert ledger.adopt_left(store, [task], lambda: backend) == 1
    task = registry.get(store, task.id or 0)
    assert task.state == state and task.job_ref == ""
    assert task.message.startswith("its job ran (" + (f"exit code {code}" if code
                                                      else "no exit code"))
    task, record = ledger.record(store, TaskKind.COMMAND, [], 0.0, registry.task_dir)
    record.release()
    ledger.adopt_left(store, [task], lambda: backend)
    task = registry.get(store, task.id or 0)
    assert task.state == TaskState.FAILED and "sbatch did not submit it" in task.message
