"""Submissions the daemon does not make itself: ``dethpc sbatch``'s lock protocol.

Owns: the lock a ``dethpc sbatch`` process holds from the moment it records its
experiment (a batch ``SUBMITTING`` named ``MARKER`` + token) until the job id is in the
records (``submitting``, ``lock_path``), the daemon's test of that lock
(``submitter_alive``) and what a batch whose submitter died before it recorded the job
id becomes (``fail_unconfirmed``: its trials and experiment end in ERROR).
Must not: run sbatch or write run directories (``dethpc.surfaces.sbatchwrap.plain``
does); the daemon calls ``submitter_alive`` and ``fail_unconfirmed`` on every tick that
finds such a batch.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlmodel import Session, select

from dethpc.common.flock import flocked
from dethpc.common.kinds import EventKind
from dethpc.store.models import (
    Batch,
    BatchState,
    Event,
    Experiment,
    ExperimentState,
    Trial,
    TrialState,
)

#: the prefix of the batch name a ``dethpc sbatch`` records (``sbatch:<token>``)
MARKER = "sbatch:"


def lock_path(runs_root: Path, token: str) -> Path:
    """Held by ``dethpc sbatch`` from its records until the job id is in them: a batch
    still SUBMITTING whose lock is free was left by a submitter that died."""
    return Path(runs_root).expanduser() / f".sbatch-{token}.lock"


@contextmanager
def submitting(runs_root: Path) -> Iterator[str]:
    """A token (the batch's name after ``MARKER``) whose lock is held in the block."""
    token = uuid.uuid4().hex
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
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    path.unlink(missing_ok=True)
    return False


def fail_unconfirmed(s: Session, batch: Batch) -> None:
    """A batch whose submitter died before it recorded the job id: its trials end in
    ERROR (the job, if sbatch made one, is not tracked; the daemon never submits it)."""
    if batch.state != BatchState.SUBMITTING:
        return
    batch.state = BatchState.FAILED
    s.add(batch)
    for trial in s.exec(select(Trial).where(Trial.experiment_id == batch.experiment_id)):
        if not trial.state.is_terminal:
            trial.state, trial.exit_reason = TrialState.ERROR, "submitter died"
            s.add(trial)
    exp = s.get(Experiment, batch.experiment_id)
    if exp is not None and exp.state == ExperimentState.ACTIVE:
        exp.state = ExperimentState.ERROR
        exp.message = ("`dethpc sbatch` ended before it recorded the Slurm job id; if a "
                       "job was submitted, it runs untracked (squeue --me)")
        s.add(exp)
    s.add(Event(experiment_id=batch.experiment_id, kind=EventKind.ERROR,
                message="dethpc sbatch ended before it recorded the job id"))
