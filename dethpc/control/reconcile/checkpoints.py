"""Marking the checkpoints that garbage collection drops, within the tick's transaction.

Owns: ``collect_garbage`` -- the checkpoints ``checkpoint_gc.to_delete`` drops under
``checkpoint_storage`` marked DELETING and handed to the daemon (``Outcome.delete``),
with the rows a daemon left DELETING when it died before deleting.
Must not: delete files (the daemon removes them only after this transaction commits,
then marks the rows DELETED) or choose what to keep (``checkpoint_gc``).
"""

from __future__ import annotations

from sqlalchemy import and_, or_, update
from sqlalchemy import select as sa_select
from sqlmodel import col

from dethpc.config.model import ExperimentConfig
from dethpc.control.checkpoint_gc import CkptInfo, to_delete
from dethpc.control.reconcile.rows import TickRows, chunks
from dethpc.store.models import Checkpoint, CheckpointState

#: the most trial ids one query's ``IN`` takes here (``rows.chunks``' size)
IN_ONE = 900


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
    t = Checkpoint.__table__.c  # type: ignore[attr-defined]
    deleting = t.state == CheckpointState.DELETING
    columns = (t.uuid, t.trial_id, t.steps_completed, t.created_at, t.validation_metric,
               t.path, t.state)
    completed = t.state == CheckpointState.COMPLETED
    if full and only is not None and len(only) <= IN_ONE:
        completed = and_(completed, t.trial_id.in_(sorted(only)))
    # one query for both the rows left DELETING and the policy's COMPLETED rows, where
    # it fits in one (every reconcile, fast or not, asked for the DELETING ones alone)
    one = full and (only is None or len(only) <= IN_ONE)
    found = s.execute(sa_select(*columns).where(
        t.experiment_id == rows.exp_id, or_(deleting, completed) if one else deleting)).all()
    kept = []
    for r in found:
        if r.state == CheckpointState.DELETING:
            out.delete[r.uuid] = r.path
        else:
            kept.append(r)
    if not full:
        return
    assert only is None or per_trial(cfg), "a partial pass needs a per-trial policy"
    cs = cfg.checkpoint_storage
    if not one:
        assert only is not None
        query = sa_select(*columns).where(t.experiment_id == rows.exp_id, completed)
        kept = [r for chunk in chunks(sorted(only))
                for r in s.execute(query.where(t.trial_id.in_(chunk))).all()]
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
