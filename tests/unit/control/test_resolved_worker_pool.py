"""An experiment's worker-pool setting has one rule (``config.model.worker_pool_of``: its
own ``slurm.workers``, else its resource pool's ``workers``), which the cluster config
(``ClusterConfig.worker_pool``, at submit) and the daemon's per-tick ``Resolved``
(``Resolved.worker_pool``) both ask: the two agree on every case, and where the pool is
unknown the cluster config says so and ``Resolved`` leaves it to the caller."""

from __future__ import annotations

from typing import Any

import pytest

from dethpc.common.errors import ConfigError
from dethpc.common.kinds import ExperimentKind
from dethpc.config import parse_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool, WorkerPool, worker_pool_of
from dethpc.control.resolved import Resolved
from dethpc.store.models import ExperimentState

SITE = WorkerPool(enabled=True, count=3)
CLUSTER = ClusterConfig(pools={"default": ResourcePool(name="default", workers=SITE),
                               "plain": ResourcePool(name="plain")})
BASE = {"name": "t", "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}


def resolved(raw: dict[str, Any]) -> Resolved:
    cfg = parse_experiment_config(raw)
    try:
        pool, error = CLUSTER.pool(cfg.resources.resource_pool), None
    except ConfigError as exc:
        pool, error = None, exc
    return Resolved(1, ExperimentKind.MANAGED, ExperimentState.ACTIVE, cfg, pool, error)


@pytest.mark.parametrize(("extra", "want"), [
    ({}, SITE),                                                      # the pool's default
    ({"resources": {"resource_pool": "plain"}}, WorkerPool()),       # a pool without one
    ({"slurm": {"workers": 2}}, WorkerPool(enabled=True, count=2)),  # its own wins
    ({"slurm": {"workers": False}}, WorkerPool(enabled=False)),      # opted out
    ({"resources": {"resource_pool": "nope"}, "slurm": {"workers": True}},
     WorkerPool(enabled=True)),                       # its own: the pool is not asked
])
def test_the_cluster_config_and_the_tick_give_one_setting(extra: dict[str, Any],
                                                          want: WorkerPool) -> None:
    raw = {**BASE, **extra}
    assert CLUSTER.worker_pool(parse_experiment_config(raw)) == want
    assert resolved(raw).worker_pool() == want


def test_an_unknown_pool_is_the_cluster_configs_error_and_none_for_the_tick() -> None:
    raw = {**BASE, "resources": {"resource_pool": "nope"}}
    with pytest.raises(ConfigError, match="unknown resource pool 'nope'"):
        CLUSTER.worker_pool(parse_experiment_config(raw))
    assert resolved(raw).worker_pool() is None
    asked: list[int] = []
    assert worker_pool_of(parse_experiment_config(raw),
                          lambda: asked.append(1) or None) is None and asked == [1]
    assert worker_pool_of(parse_experiment_config({**BASE, "slurm": {"workers": 1}}),
                          lambda: asked.append(2) or None) == WorkerPool(enabled=True, count=1)
    assert asked == [1]                                # its own setting: no pool asked
