"""Submissions the daemon does not make itself: ``dethpc sbatch``'s record and its lock.

Owns: the record of a ``dethpc sbatch`` job as a ``Ledger`` of the one submission
protocol (``SbatchLedger``: its batch, named ``MARKER`` + token, and its trials, one per
array task; confirmed with the job's refs, or ended ERROR when the job is not found),
the key adoption finds the job by (``sbatch_comment``: the ``--comment`` dethpc gives
the job, since its name is the user's), the lock the submitting process holds from its
record until the job id is in it (``submitting``, ``lock_path``, ``submitter_alive``:
the daemon leaves the record to a live submitter) and which unconfirmed batches are
``dethpc sbatch``'s, and of those the ones whose submitter died (``unconfirmed``: the
daemon adopts them through ``dethpc.control.submission.adopt``).
The ledger confirms through the models (``Store``) or, on an SQLite store at head,
through ``sqlite3`` alone (``SqliteAtHead``, ``dethpc.store.sbatch_rows``: ``dethpc sbatch``
without the ORM, issue 47 item 1); the ORM is imported where it is used.
Must not: run sbatch or write run directories (``dethpc.surfaces.sbatchwrap.plain``
does), or submit a ``dethpc sbatch`` job again (a job not found ends its experiment).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from dethpc.common.flock import flocked, held
from dethpc.common.jobref import JobRef, parse_job_id
from dethpc.common.kinds import EventKind
from dethpc.control.submission import Ledger, SubmissionKind
from dethpc.store.new_experiment import SqliteAtHead

if TYPE_CHECKING:
    from sqlmodel import Session

    from dethpc.store import Store
    from dethpc.store.models import Batch, Experiment

#: the prefix of the batch name a ``dethpc sbatch`` records (``sbatch:<token>``)
MARKER = "sbatch:"


def sbatch_comment(exp_id: int, batch_name: str) -> str:
    """The ``--comment`` of a ``dethpc sbatch`` job (unless the user set their own): what
    adoption tells it from the user's other jobs of its name."""
    return f"dethpc:exp={exp_id}:{batch_name}"


def lock_path(runs_root: Path, token: str) -> Path:
    """Held by ``dethpc sbatch`` from its records until the job id is in them: a batch
    still SUBMITTING whose lock is free was left by a submitter that died."""
    return Path(runs_root).expanduser() / f".sbatch-{token}.lock"


@contextmanager
def submitting(runs_root: Path) -> Iterator[str]:
    """A token (the batch's name after ``MARKER``) whose lock is held in the block."""
    token = os.urandom(16).hex()   # as uuid4().hex, without uuid's imports (issue 47)
    path = lock_path(runs_root, token)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with flocked(path, mode=0o600):
            yield token
    finally:
        path.unlink(missing_ok=True)


def submitter_alive(runs_root: Path, batch_name: str) -> bool:
    """Whether the ``dethpc sbatch`` that recorded ``batch_name`` still holds its lock."""
    path = lock_path(runs_root, batch_name.removeprefix(MARKER))
    alive = held(path)
    if alive is None:
        return False
    if not alive:
        path.unlink(missing_ok=True)
    return alive


def job_name_of(exp: Experiment) -> str:
    """The name Slurm knows a ``dethpc sbatch`` job by: its experiment config's ``name``
    (``plain.config_yaml`` writes the job's name there; the experiment's own name may be
    changed later)."""
    from dethpc.common.errors import ConfigError
    from dethpc.config._yaml import load_stored_yaml

    try:
        cfg = load_stored_yaml(exp.config_yaml)
    except ConfigError:
        cfg = None
    name = cfg.get("name") if isinstance(cfg, dict) else None
    return str(name) if name else exp.name


class SbatchLedger:
    """A ``dethpc sbatch`` job's record: its batch row and its trials (one per task, their
    ``request_id`` the array task id). ``store``: the ``Store``, or the SQLite file at head
    its submitter writes with ``sqlite3`` (``confirm`` only: the daemon, which gives back,
    has a ``Store``)."""

    kind = SubmissionKind.SBATCH

    def __init__(self, store: Store | SqliteAtHead, *, exp_id: int, batch_id: int,
                 batch_name: str, size: int, job_name: str) -> None:
        self.store, self.exp_id, self.batch_id, self.size = store, exp_id, batch_id, size
        self.name = job_name
        self.comment = sbatch_comment(exp_id, batch_name)

    @classmethod
    def of(cls, store: Store | SqliteAtHead, exp: Experiment, batch: Batch) -> SbatchLedger:
        assert exp.id is not None and batch.id is not None
        return cls(store, exp_id=exp.id, batch_id=batch.id, batch_name=batch.name,
                   size=batch.size, job_name=job_name_of(exp))

    def confirm(self, refs: Sequence[str], note: str = "", adopted: bool = False) -> None:
        """The job Slurm took: one job row per trial (array task ``request_id`` of the job,
        or the job itself), the batch SUBMITTED, an event."""
        jid = parse_job_id(refs[0])
        kind = EventKind.ADOPTED if adopted else EventKind.SUBMITTED
        message = (f"adopted Slurm job {jid.base} of `dethpc sbatch`, whose submitter ended "
                   "before it recorded the job id") if adopted else (
                   f"Slurm job {jid.base} submitted by dethpc sbatch")

        def ref_of(index: int) -> str:
            return str(JobRef(jid.base).task_ref(index if jid.is_array_task else None))

        if isinstance(self.store, SqliteAtHead):
            from dethpc.store import sbatch_rows

            sbatch_rows.confirm(self.store, exp_id=self.exp_id, batch_id=self.batch_id,
                                job_id=jid.base, ref_of=ref_of, event_kind=kind.value,
                                event_message=message)
            return
        from sqlmodel import select

        from dethpc.store.models import Batch, BatchState, Event, Job, Trial

        with self.store.session() as s:
            batch = s.get(Batch, self.batch_id)
            assert batch is not None
            batch.state, batch.array_job_id = BatchState.SUBMITTED, jid.base
            s.add(batch)
            for trial in s.exec(select(Trial).where(Trial.experiment_id == self.exp_id)):
                assert trial.id is not None
                s.add(Job(experiment_id=self.exp_id, trial_id=trial.id,
                          batch_id=self.batch_id, array_index=trial.request_id,
                          ref=ref_of(trial.request_id)))
            s.add(Event(experiment_id=self.exp_id, kind=kind, message=message))

    def give_back(self) -> None:
        """Slurm has no such job: its submitter died before sbatch took it (or the user's
        own ``--comment`` hid dethpc's key). Its trials and experiment end ERROR; dethpc
        never submits a ``dethpc sbatch`` job itself."""
        from sqlmodel import select

        from dethpc.store.models import (
            Batch,
            BatchState,
            Event,
            Experiment,
            ExperimentState,
            Trial,
            TrialState,
        )

        assert not isinstance(self.store, SqliteAtHead), "the daemon gives back, with a Store"

        with self.store.session() as s:
            batch = s.get(Batch, self.batch_id)
            if batch is None or batch.state != BatchState.SUBMITTING:
                return
            batch.state = BatchState.FAILED
            s.add(batch)
            for trial in s.exec(select(Trial).where(Trial.experiment_id == self.exp_id)):
                if not trial.state.is_terminal:
                    trial.state, trial.exit_reason = TrialState.ERROR, "submitter died"
                    s.add(trial)
            exp = s.get(Experiment, self.exp_id)
            if exp is not None and exp.state == ExperimentState.ACTIVE:
                exp.state = ExperimentState.ERROR
                exp.message = (f"`dethpc sbatch` ended before it recorded the Slurm job id, "
                               f"and Slurm has no job named {self.name!r} with the comment "
                               f"{self.comment!r}: sbatch did not submit it (a job given "
                               "its own --comment cannot be told apart; if one was "
                               f"submitted, it runs untracked: squeue --me "
                               f"--name={self.name})")
                s.add(exp)
            s.add(Event(experiment_id=self.exp_id, kind=EventKind.ERROR,
                        message="dethpc sbatch ended before it recorded the job id, and "
                                "Slurm has no job of it"))


def unconfirmed(s: Session, store: Store, pending: Sequence[Batch],
                runs_root: Path) -> tuple[set[int], list[Ledger]]:
    """Of the SUBMITTING batches ``pending``: the ids of those of kinds the daemon does not
    submit (``dethpc sbatch``'s), and the ledgers of those whose submitter died (its lock
    free) for adoption; a live submitter's record is left to it."""
    from dethpc.store.models import Experiment

    theirs: set[int] = set()
    orphans: list[Ledger] = []
    for batch in pending:
        exp = s.get(Experiment, batch.experiment_id)
        if exp is None or exp.kind.daemon_submits or batch.id is None:
            continue
        theirs.add(batch.id)
        if not submitter_alive(Path(runs_root), batch.name):
            orphans.append(SbatchLedger.of(store, exp, batch))
    return theirs, orphans
