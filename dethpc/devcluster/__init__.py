"""The project's own single-host Slurm cluster for development and CI.

Owns: starting, repairing, stopping and reporting on a real Slurm 22.05
cluster (munged, a private MariaDB, slurmdbd, slurmctld and four slurmd
"nodes" n1..n4 on one host) with partitions ``debug`` (default), ``low``
(preemptible, REQUEUE) and ``high`` (preempts ``low``). Entry points:
``python -m dethpc.devcluster up|down|status``, ``scripts/devcluster`` and
``dethpc dev cluster ...``. See docs/dev-cluster.md.
Must not: be used by the library at run time; it is a development tool.
"""

from dethpc.devcluster.cluster import ClusterStatus, DevCluster, Timings
from dethpc.devcluster.layout import DevClusterLayout

__all__ = ["ClusterStatus", "DevCluster", "DevClusterLayout", "Timings"]
