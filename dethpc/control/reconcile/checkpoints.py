"""Marking the checkpoints that garbage collection drops, within the tick's transaction.

Owns: ``collect_garbage`` -- the checkpoints ``checkpoint_gc.to_delete`` drops under
``checkpoint_storage`` marked DELETING and handed to the daemon (``Outcome.delete``),
with the rows a daemon left DELETING when it died before deleting.
Must not: delete files (the daemon removes them only after this transaction commits,
then marks the rows DELETED) or choose what to keep (``checkpoint_gc``).
"""

from __future__ import annotations

from sqlmodel import select

from dethpc.config.model import ExperimentConfig
from dethpc.control.checkpoint_gc import CkptInfo, to_delete
from dethpc.control.reconcile.rows import TickRows
from dethpc.store.models import Checkpoint, CheckpointState


def collect_garbage(rows: TickRows, cfg: ExperimentConfig, *, full: bool) -> None:
    """Hand out the DELETING rows, then, with ``full`` (a checkpoint or anything else
    changed this tick), apply the policy to every COMPLETED checkpoint of the experiment."""
    s, out = rows.s, rows.out
    for c in s.exec(select(Checkpoint).where(Checkpoint.experiment_id == rows.exp_id,
                                             Checkpoint.state == CheckpointState.DELETING)):
        out.delete[c.uuid] = c.path
    if not full:
        return
    cs = cfg.checkpoint_storage
    kept = list(s.exec(select(Checkpoint).where(Checkpoint.experiment_id == rows.exp_id,
                                                Checkpoint.state == CheckpointState.COMPLETED)))
    infos = [CkptInfo(c.uuid, c.trial_id, c.steps_completed, c.created_at,
                      c.validation_metric, rows.is_open(c.trial_id)) for c in kept]
    doomed = to_delete(infos, save_experiment_best=cs.save_experiment_best,
                       save_trial_best=cs.save_trial_best,
                       save_trial_latest=cs.save_trial_latest,
                       smaller_is_better=cfg.searcher.smaller_is_better)
    for c in kept:
        if c.uuid in doomed:
            c.state = CheckpointState.DELETING
            s.add(c)
            out.delete[c.uuid] = c.path
