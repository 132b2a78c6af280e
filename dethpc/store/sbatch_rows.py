"""A ``dethpc sbatch`` job's rows written with the standard library's ``sqlite3`` alone.

Owns: on an SQLite store at head (``new_experiment.SqliteAtHead``), the three writes of
the submitting process: ``insert`` (the experiment of kind SBATCH, its searcher state
already done, its batch SUBMITTING, one trial per array task that wants no job from the
daemon, its ``created`` event: one transaction), ``confirm`` (the batch SUBMITTED under
the job id, one job row per trial, an event) and ``remove`` (every row of an experiment
whose sbatch refused it). The same rows as ``dethpc.surfaces.sbatchwrap.plain.record``,
``dethpc.control.submitters.SbatchLedger.confirm`` and ``plain.unrecord`` write through
the models (tests/unit/store/test_sbatch_rows.py compares the two paths column by column).

Why (issue 47 item 1): ``dethpc sbatch`` should cost <= 0.15 s more than ``sbatch``;
SQLAlchemy, sqlmodel and the models were 0.22 s of its 0.79 s on an idle login node.
Must not: import SQLAlchemy, sqlmodel or the models, decide what is recorded (the
caller gives the values) or run sbatch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dethpc.store.new_experiment import (
    NewExperiment,
    SqliteAtHead,
    insert_event,
    insert_experiment_row,
    insert_searcher_state,
)

# the models' values and defaults (dethpc.store.models): BatchState, BatchKind.TRIALS,
# TrialState.QUEUED, JobState.PENDING; JSON columns as SQLAlchemy's JSON type writes them
_SUBMITTING, _SUBMITTED, _TRIALS = "submitting", "submitted", "trials"
_QUEUED, _PENDING = "QUEUED", "pending"


@dataclass(frozen=True)
class NewSbatch:
    """What a ``dethpc sbatch`` records before sbatch runs."""

    experiment: NewExperiment
    #: the batch's name (``submitters.MARKER`` + the submitter's token), pool, throttle
    batch_name: str
    pool: str
    throttle: int
    #: the array task ids (one trial each; ``(0,)`` for a single job)
    indices: Sequence[int]
    event_kind: str
    event_message: str


@dataclass(frozen=True)
class Inserted:
    """The ids ``insert`` gave the rows."""

    experiment_id: int
    batch_id: int
    #: (array task id, trial id)
    trials: list[tuple[int, int]]


def insert(db: SqliteAtHead, new: NewSbatch, place: Callable[[int], str]) -> Inserted:
    """The rows of ``new`` in one transaction; ``place(id)`` answers the run directory
    (stored as ``run_dir``) and may refuse it: then nothing is written."""
    with db.transaction() as conn:
        exp_id = insert_experiment_row(conn, new.experiment)
        conn.execute("UPDATE experiment SET run_dir = ? WHERE id = ?", (place(exp_id), exp_id))
        insert_searcher_state(conn, exp_id, initialized=True, shutdown=True)
        cur = conn.execute(
            "INSERT INTO batch (experiment_id, name, state, array_job_id, pool, throttle, "
            "size, created_at, kind) VALUES (?, ?, ?, NULL, ?, ?, ?, ?, ?)",
            (exp_id, new.batch_name, _SUBMITTING, new.pool, new.throttle, len(new.indices),
             time.time(), _TRIALS))
        batch_id = cur.lastrowid
        assert batch_id is not None
        trials = []
        for index in new.indices:
            cur = conn.execute(
                "INSERT INTO trial (experiment_id, request_id, state, hparams, target_length,"
                " validate_at, restarts, runs, steps_completed, best_validation, "
                "latest_validation, latest_checkpoint, exit_reason, early_exit, meta, "
                "needs_job, stop_requested_at, stop_reason, created_at, ended_at) VALUES "
                "(?, ?, ?, '{}', 0, '[]', 0, 0, 0, NULL, NULL, NULL, '', '', '{}', 0, NULL,"
                " NULL, ?, NULL)", (exp_id, index, _QUEUED, time.time()))
            assert cur.lastrowid is not None
            trials.append((index, cur.lastrowid))
        insert_event(conn, exp_id, new.event_kind, new.event_message)
    return Inserted(exp_id, batch_id, trials)


def confirm(db: SqliteAtHead, *, exp_id: int, batch_id: int, job_id: str,
            ref_of: Callable[[int], str], event_kind: str, event_message: str) -> None:
    """The batch SUBMITTED as ``job_id``, a job row per trial of the experiment (its ref
    ``ref_of(array task id)``), the event; one transaction."""
    with db.transaction() as conn:
        conn.execute("UPDATE batch SET state = ?, array_job_id = ? WHERE id = ?",
                     (_SUBMITTED, job_id, batch_id))
        trials = conn.execute("SELECT id, request_id FROM trial WHERE experiment_id = ? "
                              "ORDER BY id", (exp_id,)).fetchall()
        for trial_id, index in trials:
            conn.execute(
                "INSERT INTO job (experiment_id, trial_id, batch_id, array_index, ref, state,"
                " raw_state, restart_count, unknown_ticks, exit_code, exit_reason, exit_run,"
                " nodes, reason, live, cancel_due, submitted_at, ended_at) VALUES "
                "(?, ?, ?, ?, ?, ?, '', 0, 0, NULL, NULL, -1, '', '', 1, 0, ?, NULL)",
                (exp_id, trial_id, batch_id, index, ref_of(index), _PENDING, time.time()))
        insert_event(conn, exp_id, event_kind, event_message)


def remove(db: SqliteAtHead, exp_id: int) -> None:
    """Every row of the experiment (its events, trials, batch, searcher state, itself)."""
    with db.transaction() as conn:
        for table in ("event", "trial", "batch", "searcherstate"):
            conn.execute(f"DELETE FROM {table} WHERE experiment_id = ?",  # noqa: S608
                         (exp_id,))
        conn.execute("DELETE FROM experiment WHERE id = ?", (exp_id,))
