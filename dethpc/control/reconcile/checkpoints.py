"""Marking the checkpoints that garbage collection drops, within the tick's transaction.

Owns: ``collect_garbage`` -- the checkpoints ``checkpoint_gc.to_delete`` drops under
``checkpoint_storage`` marked DELETING and handed to the daemon (``Outcome.delete``),
with the rows a daemon left DELETING when it died before deleting.
Must not: delete files (the daemon removes them only after this transaction commits,
then marks the rows DELETED) or choose what to keep (``checkpoint_gc``).
"""

from __future__ import annotations

from sqlalchemy import select as sa_select
from sqlalchemy import update
from sqlmodel import col

from dethpc.config.model import ExperimentConfig
from dethpc.control.checkpoint_gc import CkptInfo, to_delete
from dethpc.control.reconcile.rows import TickRows, chunks
from dethpc.store.models import Checkpoint, CheckpointState


def per_trial(cfg: ExperimentConfig) -> bool:
    """The policy keeps each trial's checkpoints by that trial's alone (no
    ``save_experiment_best``): a trial nothing changed for has nothing new to drop."""
    return cfg.checkpoint_storage.save_experiment_best == 0


def collect_garbage(rows: TickRows, cfg: ExperimentConfig, *, full: bool,
                    only: set[int] | None = None) -> None:
    """Hand out the DELETING rows, then, with ``full`` (a checkpoint or anything else
    changed this tick), apply the policy to every COMPLETED checkpoint of the experiment,
    or of the trials ``only`` (allowed under a ``per_trial`` policy: the trials whose
    checkpoints or state changed since the last pass over all of them).
    The policy's columns are read, not ORM rows, and the doomed are marked by one UPDATE
    (objects of them in the session are updated with it): building every checkpoint's
    object each tick was most of the GC's cost (bench/daemon_cost)."""
    s, out = rows.s, rows.out
    for uuid, path in s.execute(sa_select(col(Checkpoint.uuid), col(Checkpoint.path)).where(
            col(Checkpoint.experiment_id) == rows.exp_id,
            col(Checkpoint.state) == CheckpointState.DELETING)):
        out.delete[uuid] = path
    if not full:
        return
    assert only is None or per_trial(cfg), "a partial pass needs a per-trial policy"
    cs = cfg.checkpoint_storage
    query = sa_select(
        col(Checkpoint.uuid), col(Checkpoint.trial_id), col(Checkpoint.steps_completed),
        col(Checkpoint.created_at), col(Checkpoint.validation_metric),
        col(Checkpoint.path)).where(
        col(Checkpoint.experiment_id) == rows.exp_id,
        col(Checkpoint.state) == CheckpointState.COMPLETED)
    if only is None:
        kept = list(s.execute(query).all())
    else:
        kept = [r for chunk in chunks(sorted(only))
                for r in s.execute(query.where(col(Checkpoint.trial_id).in_(chunk))).all()]
    infos = [CkptInfo(c.uuid, c.trial_id, c.steps_completed, c.created_at,
                      c.validation_metric, rows.is_open(c.trial_id)) for c in kept]
    doomed = to_delete(infos, save_experiment_best=cs.save_experiment_best,
                       save_trial_best=cs.save_trial_best,
                       save_trial_latest=cs.save_trial_latest,
                       smaller_is_better=cfg.searcher.smaller_is_better)
    marked = [c for c in kept if c.uuid in doomed]
    for chunk in chunks([c.uuid for c in marked]):
        s.execute(update(Checkpoint).where(col(Checkpoint.uuid).in_(chunk))
                  .values(state=CheckpointState.DELETING))
    out.delete.update((c.uuid, c.path) for c in marked)
