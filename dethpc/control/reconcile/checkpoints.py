"""Marking the checkpoints that garbage collection drops, within the tick's transaction.

Owns: ``collect_garbage`` -- the checkpoints ``checkpoint_gc.to_delete`` drops under
``checkpoint_storage`` marked DELETING and handed to the daemon (``Outcome.delete``),
with the rows a daemon left DELETING when it died before deleting.
Must not: delete files (the daemon removes them only after this transaction commits,
then marks the rows DELETED) or choose what to keep (``checkpoint_gc``).
"""

from __future__ import annotations

from sqlalchemy import and_, bindparam, or_, update
from sqlalchemy import select as sa_select
from sqlmodel import col

from dethpc.config.model import ExperimentConfig
from dethpc.control.checkpoint_gc import CkptInfo, to_delete
from dethpc.control.reconcile.rows import TickRows, chunks
from dethpc.store.models import Checkpoint, CheckpointState

#: the most trial ids one query's ``IN`` takes here (``rows.chunks``' size)
IN_ONE = 900

# The GC's reads, built once with bound parameters (``exp``, ``ids``): a statement built
# and keyed anew each reconcile was ~0.1 ms of it (bench/daemon_cost)
_c = Checkpoint.__table__.c  # type: ignore[attr-defined]
_COLUMNS = sa_select(_c.uuid, _c.trial_id, _c.steps_completed, _c.created_at,
                     _c.validation_metric, _c.path, _c.state)
_OF_EXP = _c.experiment_id == bindparam("exp")
_DELETING = _c.state == CheckpointState.DELETING
_COMPLETED = _c.state == CheckpointState.COMPLETED
_OF_IDS = _c.trial_id.in_(bindparam("ids", expanding=True))
#: the rows left DELETING
DELETING = _COLUMNS.where(_OF_EXP, _DELETING)
#: those and every COMPLETED row, or the COMPLETED rows of some trials
DELETING_AND_COMPLETED = _COLUMNS.where(_OF_EXP, or_(_DELETING, _COMPLETED))
DELETING_AND_COMPLETED_OF = _COLUMNS.where(_OF_EXP, or_(_DELETING, and_(_COMPLETED, _OF_IDS)))
COMPLETED_OF = _COLUMNS.where(_OF_EXP, _COMPLETED, _OF_IDS)


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
    # one query for both the rows left DELETING and the policy's COMPLETED rows, where
    # it fits in one (every reconcile, fast or not, asked for the DELETING ones alone)
    one = full and (only is None or len(only) <= IN_ONE)
    params: dict[str, object] = {"exp": rows.exp_id}
    if not one:
        query = DELETING
    elif only is None:
        query = DELETING_AND_COMPLETED
    else:
        query, params["ids"] = DELETING_AND_COMPLETED_OF, sorted(only)
    kept = []
    for r in s.execute(query, params).all():
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
        kept = [r for chunk in chunks(sorted(only))
                for r in s.execute(COMPLETED_OF, {"exp": rows.exp_id, "ids": chunk}).all()]
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
