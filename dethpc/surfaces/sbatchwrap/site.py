"""What ``dethpc sbatch`` needs of the cluster config, and nothing else.

Owns: ``SbatchSite`` (the backend, where run directories go and who may read them, the
Python of the jobs' ``dethpc`` shim, the Slurm client's ``slurm_bin``/``slurm_conf``,
and of each pool the name, partition and early signal: ``SitePool``), made from a
validated ``ClusterConfig`` (``of``) and kept as JSON beside the read path's facts
(``dethpc.surfaces.cli.clustercache``), so that a ``dethpc sbatch`` on an unchanged
config reads neither YAML nor the config's validation (issue 47 item 1). The pool a job
asked for (``pool_for``: its partition's, else the default pool, else a pool's defaults).
Must not: import the config's parsers or models at module level, or decide anything a
plain job submits (``plain`` does).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dethpc.config.model import ClusterConfig, ResourcePool


@dataclass(frozen=True)
class SitePool:
    """A pool as ``dethpc sbatch`` uses it: its name (the batch's), partition (how a job
    picks it) and early signal (``dethpc.jobs.directives.early_signal``)."""

    name: str
    partition: str | None
    signal: str
    signal_grace_s: int

    @classmethod
    def of(cls, pool: ResourcePool) -> SitePool:
        return cls(pool.name, pool.partition, pool.signal, pool.signal_grace_s)


@dataclass(frozen=True)
class SbatchSite:
    """Everything ``dethpc sbatch`` reads of the cluster config."""

    backend: str
    runs_root: str
    runs_mode: str
    #: ``python`` of the cluster config (None: the Python running dethpc)
    python: str | None
    slurm_bin: str | None
    slurm_conf: str | None
    pools: tuple[SitePool, ...]
    #: the cluster's default pool, else the defaults of a pool named ``default``
    fallback: SitePool

    @classmethod
    def of(cls, cluster: ClusterConfig) -> SbatchSite:
        from dethpc.common.errors import DethpcError
        from dethpc.config.model import ResourcePool

        try:
            fallback = cluster.pool(None)
        except DethpcError:
            fallback = ResourcePool(name="default")
        return cls(backend=str(cluster.backend), runs_root=str(cluster.runs_root),
                   runs_mode=cluster.runs_mode, python=cluster.python,
                   slurm_bin=None if cluster.slurm_bin is None else str(cluster.slurm_bin),
                   slurm_conf=None if cluster.slurm_conf is None else str(cluster.slurm_conf),
                   pools=tuple(SitePool.of(p) for p in cluster.pools.values()),
                   fallback=SitePool.of(fallback))

    def pool_for(self, partition: str | None) -> SitePool:
        """The pool whose partition the job asked for (its signal and grace), else the
        cluster's default pool, else the defaults of a pool."""
        if partition:
            for pool in self.pools:
                if pool.partition in partition.split(","):
                    return pool
        return self.fallback

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SbatchSite:
        """The site ``to_json`` wrote (``KeyError``/``TypeError`` when it is not one)."""
        pools = tuple(SitePool(**p) for p in data["pools"])
        return cls(**{**data, "pools": pools, "fallback": SitePool(**data["fallback"])})


def site_of(cluster: ClusterConfig | SbatchSite) -> SbatchSite:
    """``cluster``'s site (itself when it is one already)."""
    return cluster if isinstance(cluster, SbatchSite) else SbatchSite.of(cluster)
