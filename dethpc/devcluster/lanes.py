"""Several dev clusters on one host ("lanes"), and how a process picks one.

Owns: the lanes' naming scheme (``lane_layout``): lane 1 is the cluster at
``/etc/slurm`` with nodes ``n1..n4`` on ports 6817/6819/7001-7004 and state in
``$DETHPC_DEVCLUSTER_DIR`` (default ``/var/lib/dethpc-devcluster``); lane ``k`` > 1 has
its own state directory ``<that>-lane<k>``, slurm.conf directory ``/etc/slurm-lane<k>``,
cluster name ``devcluster<k>``, nodes ``l<k>n1..l<k>n4``, ports 10*(k-1) above lane 1's
and accounting database ``slurm_acct_db_lane<k>`` (its own slurmdbd); every lane shares
munged, the one MariaDB server and the container image with lane 1. Also how many lanes
``up`` brings up (``lane_count``), which lane this process uses (``current_lane``:
``$DETHPC_DEVCLUSTER_LANE``, default 1) and the environment that binds a process to a
lane (``lane_env``: ``SLURM_CONF`` first of all, which every Slurm client command and
daemon reads).
Must not: start processes or write files, or decide which tests run in which lane
(tests/conftest.py does).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from dethpc.devcluster.layout import SLURM_ETC, DevClusterLayout, base_dir

#: the lane whose cluster this process (and what it starts) uses; unset: lane 1
LANE_ENV = "DETHPC_DEVCLUSTER_LANE"
#: how many lanes ``up``/``status`` act on when no ``--lanes`` is given
LANES_ENV = "DETHPC_DEVCLUSTER_LANES"
#: set by ``lane_env``: the lane's node names, comma-separated (for scripts and tests)
NODES_ENV = "DETHPC_DEVCLUSTER_NODES"
DEFAULT_LANES = 3
MAX_LANES = 9
#: lane k's ports are lane 1's plus PORT_STEP * (k - 1)
PORT_STEP = 10


def _check(lane: int) -> int:
    if not 1 <= lane <= MAX_LANES:
        raise ValueError(f"dev cluster lane {lane} is not allowed; lanes are 1..{MAX_LANES}")
    return lane


def lane_layout(lane: int = 1, base: Path | None = None) -> DevClusterLayout:
    """The layout of lane ``lane``'s cluster (``base``: lane 1's state directory)."""
    base = base or base_dir()
    if _check(lane) == 1:
        return DevClusterLayout(state_dir=base)
    first = DevClusterLayout(state_dir=base)
    step = PORT_STEP * (lane - 1)
    prefix = f"l{lane}n"
    gres_nodes = tuple(f"{prefix}{name.removeprefix(first.node_prefix)}"
                       for name in first.site.gres.nodes)
    site = replace(first.site, gres=replace(first.site.gres, nodes=gres_nodes))
    return replace(first, state_dir=Path(f"{base}-lane{lane}"), shared_dir=base, lane=lane,
                   cluster_name=f"devcluster{lane}", node_prefix=prefix,
                   first_node_port=first.first_node_port + step,
                   ctld_port=first.ctld_port + step, dbd_port=first.dbd_port + step,
                   db_name=f"{first.db_name}_lane{lane}",
                   slurm_etc=Path(f"{SLURM_ETC}-lane{lane}"), site=site)


def current_lane() -> int:
    """The lane this process is bound to: ``$DETHPC_DEVCLUSTER_LANE`` (default 1)."""
    raw = os.environ.get(LANE_ENV, "").strip()
    if not raw:
        return 1
    if not raw.isdigit():
        raise ValueError(f"${LANE_ENV}={raw!r} is not a lane number (1..{MAX_LANES})")
    return _check(int(raw))


def current_layout() -> DevClusterLayout:
    """The layout of this process's lane (``current_lane``)."""
    return lane_layout(current_lane())


def lane_count(value: int | None = None) -> int:
    """How many lanes: ``value``, else ``$DETHPC_DEVCLUSTER_LANES``, else 2."""
    if value is None:
        raw = os.environ.get(LANES_ENV, "").strip()
        if raw and not raw.isdigit():
            raise ValueError(f"${LANES_ENV}={raw!r} is not a number of lanes")
        value = int(raw) if raw else DEFAULT_LANES
    return _check(value)


def lane_env(layout: DevClusterLayout) -> dict[str, str]:
    """The variables that bind a process (and what it starts) to ``layout``'s cluster."""
    return {"SLURM_CONF": str(layout.slurm_conf), LANE_ENV: str(layout.lane),
            NODES_ENV: ",".join(layout.node_names)}


def existing_lanes(base: Path | None = None) -> list[int]:
    """The lanes whose state directory exists (``down`` stops each of them)."""
    base = base or base_dir()
    return [k for k in range(1, MAX_LANES + 1) if lane_layout(k, base).state_dir.is_dir()]
