"""The records a trial writes where Determined's harness would call its master, carried
into rows (docs/job-contract.md, "Records for Determined's master calls").

Owns: ``MasterCalls`` -- one handler per record, each applied within the tick's
transaction: ``early_exit`` (the first reported reason is kept on the trial, the
searcher hears it when the trial's job ends: ``job_rules.early_exit_change``),
``metadata`` (the trial's metadata replaced), ``alert`` (an experiment event with its
level, title and description) and ``checkpoint_deleted`` (the checkpoint row DELETING
with the hidden ``.deleted-<uuid>`` directory as its path, so that the daemon removes
whatever the job left of it after the commit and marks it DELETED, as garbage
collection's own deletes; the trial's latest checkpoint moves to the newest one left).
Must not: decide what a record means (``ingest_rules``), read or write files, delete
anything itself or call the searcher (the job's end does, ``job_ends``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlmodel import select

from dethpc.common.kinds import EventKind
from dethpc.common.paths import deleted_checkpoint
from dethpc.control.reconcile.ingest_rules import (
    BadRecord,
    Kept,
    alert_of,
    early_exit_of,
    latest_kept,
    metadata_of,
)
from dethpc.control.reconcile.rows import TickRows
from dethpc.store.models import Checkpoint, CheckpointState, Trial


class MasterCalls:
    """The master-call records of one experiment's tick."""

    def __init__(self, rows: TickRows) -> None:
        self.rows = rows

    def early_exit(self, trial: Trial, rec: dict[str, Any]) -> None:
        why = early_exit_of(rec)
        if isinstance(why, BadRecord):
            self.rows.event(EventKind.WARNING, why.problem, trial)
            return
        if trial.early_exit:
            return   # Determined keeps the first report of a trial too
        trial.early_exit = why.value
        self.rows.s.add(trial)
        self.rows.event(EventKind.EARLY_EXIT, f"the training code reported an early exit "
                        f"({why.value}); the trial ends with its job", trial)

    def metadata(self, trial: Trial, rec: dict[str, Any]) -> None:
        meta = metadata_of(rec)
        if isinstance(meta, BadRecord):
            self.rows.event(EventKind.WARNING, meta.problem, trial)
            return
        trial.meta = meta   # a new dict: SQLAlchemy does not see in-place changes
        self.rows.s.add(trial)
        self.rows.out.changed = True

    def alert(self, trial: Trial, rec: dict[str, Any]) -> None:
        a = alert_of(rec)
        self.rows.event(EventKind.ALERT, a.message(), trial,
                        data={"level": a.level, "title": a.title,
                              "description": a.description})

    def checkpoint_deleted(self, trial: Trial, rec: dict[str, Any]) -> None:
        s, uuid = self.rows.s, str(rec["uuid"])
        ck = s.get(Checkpoint, uuid)
        if ck is None or ck.trial_id != trial.id:
            self.rows.event(EventKind.WARNING, f"checkpoint_deleted record for {uuid}, which is "
                            "not a checkpoint of this trial: ignored", trial)
            return
        if ck.state != CheckpointState.COMPLETED:
            return   # garbage collection got there first, or a replayed line
        ck.state = CheckpointState.DELETING
        ck.path = str(deleted_checkpoint(Path(ck.path)))
        s.add(ck)
        self.rows.out.delete[uuid] = ck.path
        self.rows.event(EventKind.CHECKPOINT_DELETED, f"checkpoint {uuid} (step "
                        f"{ck.steps_completed}) deleted by the training code", trial)
        if trial.latest_checkpoint == uuid:
            s.flush()
            trial.latest_checkpoint = latest_kept(
                Kept(c.uuid, c.steps_completed, c.created_at) for c in s.exec(
                    select(Checkpoint).where(Checkpoint.trial_id == trial.id,
                                             Checkpoint.state == CheckpointState.COMPLETED)))
            s.add(trial)
