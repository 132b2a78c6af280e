"""``dethpc admin``: compare the cluster config with the live Slurm cluster.

Owns: ``facts`` (what the cluster says, parsed; one fixed set of commands),
``checks`` (the pure comparison: facts + cluster config -> findings) and
``probe`` (one tiny job per pool that proves ``runs_root`` and ``python`` are
reachable from compute nodes).
Must not: change the cluster or the cluster config; submit anything but the probe jobs.
"""

from dethpc.surfaces.admin.checks import Finding, Severity, check_cluster, exit_code
from dethpc.surfaces.admin.facts import ClusterFacts, gather_facts

__all__ = ["ClusterFacts", "Finding", "Severity", "check_cluster", "exit_code", "gather_facts"]
