"""An open experiment's (config, resource pool), resolved once per daemon tick.

Owns: ``Resolved`` -- what a tick reads of each open experiment at its start (the
config parsed from the stored text, the resource pool the cluster config gives it, its
kind and state then) and hands to every phase, so that no phase parses the config or
looks the pool up again (issue 46 item 3). Built by ``daemon.shared.Scope.open_resolved``
from one read of the open experiments' rows.
Must not: read or write the store, or be kept past the tick (the next tick resolves
again: ``dethpc experiment set-concurrency`` changes the stored config).
"""

from __future__ import annotations

from dataclasses import dataclass

from dethpc.common.errors import ConfigError
from dethpc.common.kinds import ExperimentKind
from dethpc.config import parse_stored
from dethpc.config.model import (
    ClusterConfig,
    ExperimentConfig,
    ResourcePool,
    WorkerPool,
    worker_pool_of,
)
from dethpc.store.models import Experiment, ExperimentState


@dataclass(frozen=True)
class Resolved:
    """One open experiment as a tick resolved it, once, from the row read at the tick's
    start: its config (``load_config``) and its resource pool (``cluster.pool``), which
    every phase takes from here instead of resolving them again (issue 46 item 3), and
    its kind and state then (a phase that acts on the state reads the row it changes:
    the reconcile may end the experiment meanwhile)."""

    id: int
    kind: ExperimentKind
    state: ExperimentState
    cfg: ExperimentConfig
    #: the config's resource pool; None when the cluster config lacks it (``pool_error``)
    resource_pool: ResourcePool | None
    pool_error: ConfigError | None = None

    @classmethod
    def of(cls, exp: Experiment, cluster: ClusterConfig) -> Resolved:
        assert exp.id is not None
        cfg = parse_stored(exp.config_yaml)   # as reconcile.load_config
        try:
            pool, error = cluster.pool(cfg.resources.resource_pool), None
        except ConfigError as exc:   # raised where a phase needs the pool, as before
            pool, error = None, exc
        return cls(exp.id, exp.kind, ExperimentState(exp.state), cfg, pool, error)

    def worker_pool(self) -> WorkerPool | None:
        """Its worker-pool setting by ``ClusterConfig.worker_pool``'s one rule
        (``worker_pool_of``) with the pool resolved here; None when that pool is unknown
        (the caller asks ``ClusterConfig.worker_pool``, which says so where it did
        before)."""
        return worker_pool_of(self.cfg, lambda: self.resource_pool)

    def pool(self) -> ResourcePool:
        """The experiment's resource pool; ``ConfigError`` (as ``cluster.pool``) when the
        cluster config has no such pool."""
        if self.resource_pool is None:
            assert self.pool_error is not None
            raise self.pool_error
        return self.resource_pool
