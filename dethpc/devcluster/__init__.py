"""The project's own single-host Slurm clusters for development and CI.

Owns: starting, repairing, stopping and reporting on real Slurm 22.05 clusters on
one host ("lanes", ``lanes``): each has its own slurmctld, slurmdbd (and accounting
database), four slurmd "nodes" (lane 1: n1..n4, lane k: lkn1..lkn4) and partitions
``debug`` (default), ``low`` (preemptible, REQUEUE) and ``high`` (preempts ``low``);
all share munged and one private MariaDB. Entry points:
``python -m dethpc.devcluster up|down|status``, ``scripts/devcluster`` and
``dethpc dev cluster ...``. See docs/dev-cluster.md.
Must not: be used by the library at run time; it is a development tool (the import
contract in pyproject.toml keeps product code from importing it).
"""

from dethpc.devcluster.cluster import ClusterStatus, DevCluster, Timings
from dethpc.devcluster.lanes import current_layout, lane_env, lane_layout
from dethpc.devcluster.layout import DevClusterLayout

__all__ = ["ClusterStatus", "DevCluster", "DevClusterLayout", "Timings", "current_layout",
           "lane_env", "lane_layout"]
