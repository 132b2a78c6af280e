"""Checkpoint garbage collection policy (pure).

Owns: which checkpoints to delete under ``checkpoint_storage``'s
``save_experiment_best``, ``save_trial_best`` and ``save_trial_latest``.
A checkpoint a live trial may resume from (its latest) is always kept.
Must not: delete anything (the daemon deletes what this returns).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class CkptInfo:
    uuid: str
    trial_id: int
    steps: int
    created: float
    metric: float | None
    trial_live: bool


def to_delete(ckpts: Iterable[CkptInfo], *, save_experiment_best: int, save_trial_best: int,
              save_trial_latest: int, smaller_is_better: bool) -> set[str]:
    """UUIDs to delete. Kept: each trial's ``save_trial_latest`` newest, its
    ``save_trial_best`` best by metric, the experiment's ``save_experiment_best``
    best, and the newest of any live trial."""
    items = list(ckpts)
    sign = 1.0 if smaller_is_better else -1.0

    def best_key(c: CkptInfo) -> tuple[float, float]:
        return (sign * c.metric if c.metric is not None else float("inf"), -c.created)

    keep: set[str] = set()
    by_trial: dict[int, list[CkptInfo]] = defaultdict(list)
    for c in items:
        by_trial[c.trial_id].append(c)
    for cs in by_trial.values():
        newest = sorted(cs, key=lambda c: (c.steps, c.created), reverse=True)
        keep.update(c.uuid for c in newest[:save_trial_latest])
        if newest and newest[0].trial_live:
            keep.add(newest[0].uuid)
        scored = sorted((c for c in cs if c.metric is not None), key=best_key)
        keep.update(c.uuid for c in scored[:save_trial_best])
    scored_all = sorted((c for c in items if c.metric is not None), key=best_key)
    keep.update(c.uuid for c in scored_all[:save_experiment_best])
    return {c.uuid for c in items} - keep
