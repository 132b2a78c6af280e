"""Is a usable Slurm cluster reachable from here? (for the test suite and CI)

Owns: ``probe()``, a cheap read-only check (``scontrol ping`` and ``sinfo``)
that any user can run, returning why the cluster is unusable or None; and
``ensure_for_tests()``, which may start the dev cluster when asked to (only this
process's lane: the cluster ``SLURM_CONF`` and ``$DETHPC_DEVCLUSTER_LANE`` name).
Must not: need root, or start anything unless ``ensure_for_tests`` is told to.
"""

from __future__ import annotations

import os
import shutil

from dethpc.common.errors import CommandError, DethpcError
from dethpc.common.jobenv import ENV_TEST_START_CLUSTER
from dethpc.common.runner import CommandRunner

USABLE = frozenset({"idle", "mixed", "allocated", "completing"})
START_ENV = ENV_TEST_START_CLUSTER


def probe(min_nodes: int = 4, runner: CommandRunner | None = None) -> str | None:
    """None when slurmctld answers and ``min_nodes`` nodes are usable, else the reason."""
    if shutil.which("scontrol") is None:
        return "the Slurm client commands are not installed (no `scontrol` on PATH)"
    run = runner or CommandRunner(timeout=10.0, retries=0)
    try:
        ping = run.run(["scontrol", "ping"], check=False)
    except CommandError as exc:
        return f"Slurm client commands are not usable ({exc.reason or exc})"
    if ping.returncode != 0 or "is UP" not in ping.stdout:
        detail = (ping.stdout + ping.stderr).strip().splitlines()
        return f"slurmctld is not reachable (`scontrol ping`: {detail[-1] if detail else '?'})"
    sinfo = run.run(["sinfo", "-h", "-N", "-o", "%N|%T"], check=False)
    states = dict(line.split("|", 1) for line in sinfo.stdout.split() if "|" in line)
    usable = sorted(n for n, s in states.items() if s.lower() in USABLE)
    if len(usable) < min_nodes:
        return f"only {len(usable)} of {min_nodes} Slurm nodes are usable (sinfo: {states})"
    return None


def ensure_for_tests(min_nodes: int = 4) -> str | None:
    """``probe()``; when it fails and ``$DETHPC_TEST_START_CLUSTER=1`` as root, run ``up``
    first. Returns the reason the cluster is unusable, or None."""
    reason = probe(min_nodes)
    if reason is None or os.environ.get(START_ENV) != "1":
        return reason
    if os.geteuid() != 0:
        return f"{reason}; {START_ENV}=1 needs root to start the dev cluster"
    from dethpc.devcluster.cluster import DevCluster

    try:
        DevCluster().up()
    except DethpcError as exc:
        return f"{reason}; starting the dev cluster failed: {exc}"
    return probe(min_nodes)
