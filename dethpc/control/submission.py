"""Submitting a job dethpc starts: record, submit through the backend, confirm; adopt
after a crash; answer a refusal. One protocol for every kind.

Owns: ``Submission.submit`` — the kind's ``Ledger`` records the submission first (a batch
row for trial arrays, pool workers and ``dethpc sbatch``'s jobs, a file under
``runs_root`` for an image's pre-pull job: its ``name``, and its ``comment`` where the
name is the user's, is what adoption finds the job by; a task's row for shells,
notebooks, commands and TensorBoard jobs, ``dethpc.surfaces.tasks.ledger``), then one
``backend.submit``
(``send``: the same protocol around any submit callable, for ``dethpc sbatch``'s own
words), then the ledger confirms the refs. A refusal over a limit gives the
work back (``Ledger.give_back``: nothing reached Slurm) and asks the budget's policy
(``RefusalPolicy.refusal``: wait and cap, or fail when waiting cannot help); any other
error propagates with the record left unconfirmed, for ``adopt``. ``Submission.adopt`` —
the records a killed submitter left unconfirmed: one ``backend.find`` by name for all
of them, confirmed with what Slurm has when found, given back when not (the work is
submitted anew by its phase). ``BatchLedger`` is the batch row's ledger;
``fault_point`` the kill -9 seam of the tests (``DETHPC_FAULT_POINT``: ``after_record``,
``after_sbatch``, ``after_confirm``, each also as ``<point>:<kind>``).
The protocol (``send``, ``fault_point``, the kinds) imports neither the ORM nor a backend:
``dethpc sbatch`` runs it on an SQLite store at head without them (issue 47 item 1;
``BatchLedger`` and ``record_batch`` import the models where they run).
Must not: decide what to submit or how many (the submit phase and the budget's ``room``
do), or build a job's script or its sbatch options (``dethpc.jobs``).
"""
from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from dethpc.common.errors import SubmitLimitError
from dethpc.common.jobref import JobRef, base_job_id, parse_job_id, task_refs
from dethpc.common.kinds import EventKind

if TYPE_CHECKING:
    import logging

    from dethpc.backends.base import Backend, JobInfo, JobRequest
    from dethpc.store import Store
    from dethpc.store.models import Batch, BatchKind, Trial


def _log() -> logging.Logger:
    """This module's logger, ``logging`` imported when something is said (it is not on
    ``dethpc sbatch``'s light path otherwise, issue 47)."""
    import logging

    return logging.getLogger(__name__)


class SubmissionKind(StrEnum):
    """What a submission starts (the fault points' and the events' word for it)."""

    TRIALS = "trials"          # an array of trials, or one trial's own (het) job
    WORKERS = "workers"        # the worker pool's array
    PULL = "pull"              # an image's pre-pull job
    SBATCH = "sbatch"          # ``dethpc sbatch``'s job: the user's script, the user's name
    # a task's job (``dethpc.surfaces.tasks``: its row is the record), as ``TaskKind``
    COMMAND = "command"        # ``dethpc cmd run``
    SHELL = "shell"            # ``dethpc shell start``'s holder job
    NOTEBOOK = "notebook"      # ``dethpc notebook start``
    TENSORBOARD = "tensorboard"  # ``dethpc tensorboard start --slurm``


def fault_point(name: str, kind: SubmissionKind | None = None) -> None:
    """Fault injection for tests: ``DETHPC_FAULT_POINT=<name>`` (or ``<name>:<kind>``)
    SIGKILLs this process there."""
    wanted = os.environ.get("DETHPC_FAULT_POINT")
    if wanted and (wanted == name or (kind is not None and wanted == f"{name}:{kind}")):
        _log().warning("fault injection: SIGKILL at %s", wanted)
        os.kill(os.getpid(), signal.SIGKILL)


class Ledger(Protocol):
    """Where one kind of submission is recorded before the backend sees it."""

    kind: SubmissionKind
    #: the job name the submission goes out under, and adoption finds it by
    name: str
    #: the comment it goes out under, which adoption matches as well ("": the name alone
    #: is the job's identity; ``dethpc sbatch``'s jobs carry the user's name)
    comment: str
    #: the experiment whose budget a refusal is charged to, and how many trials it holds
    exp_id: int
    size: int

    def confirm(self, refs: Sequence[str], note: str = "", adopted: bool = False) -> None:
        """The backend took it as ``refs`` (``adopted``: found by name after a crash)."""
        ...

    def give_back(self) -> None:
        """Nothing reached the backend: the work needs a job again."""
        ...


class RefusalPolicy(Protocol):
    """The submit budget's answer to sbatch's word (``SubmitBudget``)."""

    def refusal(self, exp_id: int, size: int, exc: SubmitLimitError) -> None: ...

    def succeeded(self) -> None: ...


@dataclass(frozen=True)
class Found:
    """The job a submission's name found: ``base`` is the array job id (or the job id),
    and ``is_array`` says whether its tasks are ``<base>_<index>``."""

    base: str
    is_array: bool

    def refs(self, size: int) -> list[JobRef]:
        """The refs of a submission of ``size`` jobs (array tasks, or the one job)."""
        return task_refs(self.base, range(size)) if self.is_array else [JobRef(self.base)]


def found_job(name: str, found: Sequence[JobInfo], comment: str = "") -> Found | None:
    """The job among ``found`` named ``name`` (and, when ``comment`` is given, carrying
    it), or None: the submission never reached Slurm. "123_4" is an array task, "123" or
    "123+0" one job (its het components)."""
    tasks = [i for i in found if i.name == name and (not comment or i.comment == comment)]
    if not tasks:
        return None
    jid = parse_job_id(tasks[0].ref)
    return Found(jid.base, jid.is_array_task)


class Submission:
    def __init__(self, backend: Backend, policy: RefusalPolicy) -> None:
        self.backend, self.policy = backend, policy

    def submit(self, ledger: Ledger, request: JobRequest, note: str = "") -> list[str]:
        """``request`` (under ``ledger.name``), recorded by ``ledger`` already: its refs,
        or [] when it was refused over a limit (the work given back, the policy asked)."""
        return send(ledger, self.policy, lambda: self.backend.submit(request), note)

    def adopt(self, ledgers: Sequence[Ledger]) -> int:
        """``adopt`` through this submission's backend."""
        return adopt(self.backend, ledgers)


def send(ledger: Ledger, policy: RefusalPolicy, submit: Callable[[], Sequence[str]],
         note: str = "") -> list[str]:
    """The protocol around one ``submit()`` (the backend's, or ``dethpc sbatch``'s own
    sbatch words through ``dethpc.backends``), ``ledger`` recorded already: the refs,
    confirmed. [] when nothing reached the backend: a refusal over a limit (the work
    given back, ``policy`` asked) or an empty answer (the backend took nothing: the work
    given back). Any other error propagates with the record unconfirmed, for ``adopt``."""
    fault_point("after_record", ledger.kind)
    try:
        refs = list(submit())
    except SubmitLimitError as exc:
        ledger.give_back()
        policy.refusal(ledger.exp_id, ledger.size, exc)
        return []
    if not refs:
        ledger.give_back()
        return []
    fault_point("after_sbatch", ledger.kind)
    policy.succeeded()
    ledger.confirm(refs, note)
    fault_point("after_confirm", ledger.kind)
    return refs


def adopt(backend: Backend, ledgers: Sequence[Ledger]) -> int:
    """Unconfirmed submissions, looked up by name with one ``backend.find``: adopted when
    found, given back when not. Returns how many were adopted."""
    if not ledgers:
        return 0
    found = backend.find([ledger.name for ledger in ledgers])
    adopted = 0
    for ledger in ledgers:
        job = found_job(ledger.name, found, ledger.comment)
        if job is None:
            ledger.give_back()
            continue
        ledger.confirm(job.refs(ledger.size), adopted=True)
        adopted += 1
    return adopted


# ---------------------------------------------------------------------- a batch row
def record_batch(store: Store, exp_id: int, pool: str, kind: BatchKind,
                 name_of: Callable[[int], str], *, trials: Sequence[Trial] = (),
                 size: int = 0, throttle: int = 0) -> Batch:
    """A batch SUBMITTING, committed, with one job row per trial (no ref yet; the trials no
    longer need a job); ``name_of(batch_id)`` names it. Returns the batch (detached)."""
    from dethpc.store.models import Batch, Job, Trial

    with store.session() as s:
        batch = Batch(experiment_id=exp_id, pool=pool, size=size or len(trials), kind=kind)
        s.add(batch)
        s.flush()
        assert batch.id is not None
        batch.name = name_of(batch.id)
        batch.throttle = throttle
        for index, trial in enumerate(trials):
            t = s.get(Trial, trial.id)
            assert t is not None and t.id is not None
            t.needs_job = False
            s.add(t)
            s.add(Job(experiment_id=exp_id, trial_id=t.id, batch_id=batch.id,
                      array_index=index))
        s.add(batch)
    return batch


class BatchLedger:
    """A trial batch's or a worker array's record: its row in the store (and the trials'
    job rows)."""

    def __init__(self, store: Store, batch: Batch) -> None:
        from dethpc.store.models import BatchKind

        assert batch.id is not None
        self.store, self.batch_id = store, batch.id
        self.exp_id, self.size, self.name = batch.experiment_id, batch.size, batch.name
        self.comment = ""    # the batch's name is its identity
        self.kind = (SubmissionKind.WORKERS if batch.kind == BatchKind.WORKERS
                     else SubmissionKind.TRIALS)

    def confirm(self, refs: Sequence[str], note: str = "", adopted: bool = False) -> None:
        """The batch SUBMITTED under its array job id, each job row its ref, and an event
        (``note``: the nodes it excludes, and why)."""
        from sqlmodel import select

        from dethpc.store.models import Batch, BatchState, Event, Job

        with self.store.session() as s:
            b = s.get(Batch, self.batch_id)
            assert b is not None
            b.state, b.array_job_id = BatchState.SUBMITTED, base_job_id(refs[0])
            s.add(b)
            for job in s.exec(select(Job).where(Job.batch_id == self.batch_id)):
                job.ref = refs[job.array_index]
                s.add(job)
            s.add(Event(experiment_id=self.exp_id, kind=self.event_kind(adopted),
                        message=self.message(b.array_job_id, len(refs), note, adopted)))

    def event_kind(self, adopted: bool) -> EventKind:
        if adopted:
            return EventKind.ADOPTED
        return EventKind.WORKERS if self.kind is SubmissionKind.WORKERS else EventKind.SUBMITTED

    def message(self, job_id: str, n: int, note: str, adopted: bool) -> str:
        if adopted:
            return f"adopted job {job_id} of batch {self.batch_id} after restart"
        if self.kind is SubmissionKind.WORKERS:
            return (f"batch {self.batch_id}: {n} pool worker(s) as job {job_id}"
                    + (f"; {note}" if note else ""))
        return (f"batch {self.batch_id}: {n} trial(s) as job {job_id}"
                + (f" {note}" if note else ""))

    def give_back(self) -> None:
        """The batch FAILED, its never-submitted job rows gone, its open trials need a job
        again (a worker array has no job rows: its items wait in the pool's queue)."""
        from sqlmodel import select

        from dethpc.store.models import Batch, BatchState, Job, Trial

        with self.store.session() as s:
            for job in s.exec(select(Job).where(Job.batch_id == self.batch_id)):
                t = s.get(Trial, job.trial_id)
                if t is not None and not t.state.is_terminal:
                    t.needs_job = True
                    s.add(t)
                s.delete(job)
            b = s.get(Batch, self.batch_id)
            assert b is not None
            b.state = BatchState.FAILED
            s.add(b)
