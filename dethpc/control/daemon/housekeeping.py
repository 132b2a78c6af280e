"""Housekeeping: removing the checkpoint directories that garbage collection doomed.

Owns: ``CheckpointDeleter.delete`` — after the reconciler's transaction has committed
(its checkpoints are DELETING), remove their directories, then mark the ones that are
gone DELETED. A daemon killed in between leaves them DELETING; the next tick hands them
out again.
Must not: choose what to delete (``checkpoint_gc`` and the reconciler do) or mark a
checkpoint DELETED whose directory is still there.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from sqlmodel import col, select

from dethpc.control.daemon.shared import fault_point
from dethpc.store import Store
from dethpc.store.models import Checkpoint, CheckpointState

log = logging.getLogger(__name__)
#: checkpoints marked per query (SQLite before 3.32 allows 999 parameters)
IN_BATCH = 500


class CheckpointDeleter:
    def __init__(self, store: Store) -> None:
        self.store = store

    def delete(self, doomed: dict[str, str]) -> None:
        """Remove checkpoint directories that GC marked DELETING in a transaction that
        has committed, then mark them DELETED."""
        if not doomed:
            return
        gone = []
        for uuid, path in doomed.items():
            shutil.rmtree(path, ignore_errors=True)
            if not Path(path).exists():
                gone.append(uuid)
            else:
                log.warning("checkpoint %s: could not delete %s; will retry", uuid, path)
        fault_point("after_gc_rmtree")
        with self.store.session() as s:
            for i in range(0, len(gone), IN_BATCH):
                for ck in list(s.exec(select(Checkpoint).where(
                        col(Checkpoint.uuid).in_(gone[i:i + IN_BATCH]),
                        Checkpoint.state == CheckpointState.DELETING))):
                    ck.state = CheckpointState.DELETED
                    s.add(ck)
