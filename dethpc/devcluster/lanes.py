"""Several dev clusters on one host ("lanes"), and how a process picks one.

Owns: the lanes' naming scheme (``lane_layout``): lane 1 is the cluster at
``/etc/slurm`` with nodes ``n1..n4`` on ports 6817/6819/7001-7004 and state in
``$DETHPC_DEVCLUSTER_DIR`` (default ``/var/lib/dethpc-devcluster``); lane ``k`` > 1 has
its own state directory ``<that>-lane<k>``, slurm.conf directory ``/etc/slurm-lane<k>``,
cluster name ``devcluster<k>``, nodes ``l<k>n1..l<k>n4``, ports 10*(k-1) above lane 1's
and accounting database ``slurm_acct_db_lane<k>`` (its own slurmdbd); every lane shares
munged, the one MariaDB server and the container image with lane 1. The lanes of a
built Slurm release (``--slurm 25.11``, ``releases``) are numbered the same way beside
them: state ``<base>-slurm25.11[-lane<k>]``, slurm.conf in ``/etc/slurm-25.11[-lane<k>]``,
cluster ``s2511[-<k>]``, nodes ``s<k>n1..``, ports ``RELEASE_PORT_STEP`` above the
22.05 lane's; ``$DETHPC_DEVCLUSTER_SLURM`` picks the release as the lane variable picks
the lane. Also how many lanes
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

from dethpc.common.jobenv import (
    ENV_DEVCLUSTER_LANE,
    ENV_DEVCLUSTER_LANES,
    ENV_DEVCLUSTER_NODES,
    ENV_DEVCLUSTER_SLURM,
)
from dethpc.config.cluster import path_with_first
from dethpc.devcluster.layout import SLURM_ETC, DevClusterLayout, base_dir
from dethpc.devcluster.releases import DEFAULT_RELEASE, SlurmRelease

#: the lane whose cluster this process (and what it starts) uses; unset: lane 1
LANE_ENV = ENV_DEVCLUSTER_LANE
#: how many lanes ``up``/``status`` act on when no ``--lanes`` is given
LANES_ENV = ENV_DEVCLUSTER_LANES
#: set by ``lane_env``: the lane's node names, comma-separated (for scripts and tests)
NODES_ENV = ENV_DEVCLUSTER_NODES
DEFAULT_LANES = 3
MAX_LANES = 9
#: the Slurm release of this process's cluster (unset: Debian's 22.05)
RELEASE_ENV = ENV_DEVCLUSTER_SLURM
#: lane k's ports are lane 1's plus PORT_STEP * (k - 1)
PORT_STEP = 10
#: a built release's lanes are numbered as the 22.05 ones, this many ports above them
RELEASE_PORT_STEP = 100


def _check(lane: int) -> int:
    if not 1 <= lane <= MAX_LANES:
        raise ValueError(f"dev cluster lane {lane} is not allowed; lanes are 1..{MAX_LANES}")
    return lane


def lane_layout(lane: int = 1, base: Path | None = None,
                release: SlurmRelease = DEFAULT_RELEASE) -> DevClusterLayout:
    """The layout of lane ``lane``'s cluster of ``release`` (``base``: the 22.05 lane 1's
    state directory, which is also what every cluster of the host shares)."""
    base = base or base_dir()
    _check(lane)
    first = DevClusterLayout(state_dir=base)
    if lane == 1 and release is DEFAULT_RELEASE:
        return first
    step = PORT_STEP * (lane - 1)
    if release is DEFAULT_RELEASE:
        prefix, state, etc, name = (f"l{lane}n", Path(f"{base}-lane{lane}"),
                                    Path(f"{SLURM_ETC}-lane{lane}"), f"devcluster{lane}")
        db = f"{first.db_name}_lane{lane}"
    else:
        step += RELEASE_PORT_STEP
        tag = release.value.replace(".", "")
        lane_tag = "" if lane == 1 else f"-lane{lane}"
        prefix = f"s{lane}n"
        state = Path(f"{base}-slurm{release.value}{lane_tag}")
        etc = Path(f"{SLURM_ETC}-{release.value}{lane_tag}")
        name = f"s{tag}" + ("" if lane == 1 else f"l{lane}")
        db = f"{first.db_name}_s{tag}" + ("" if lane == 1 else f"_lane{lane}")
    gres_nodes = tuple(f"{prefix}{node.removeprefix(first.node_prefix)}"
                       for node in first.site.gres.nodes)
    site = replace(first.site, gres=replace(first.site.gres, nodes=gres_nodes))
    return replace(first, state_dir=state, shared_dir=base, lane=lane, cluster_name=name,
                   node_prefix=prefix, first_node_port=first.first_node_port + step,
                   ctld_port=first.ctld_port + step, dbd_port=first.dbd_port + step,
                   db_name=db, slurm_etc=etc, site=site, release=release)


def current_lane() -> int:
    """The lane this process is bound to: ``$DETHPC_DEVCLUSTER_LANE`` (default 1)."""
    raw = os.environ.get(LANE_ENV, "").strip()
    if not raw:
        return 1
    if not raw.isdigit():
        raise ValueError(f"${LANE_ENV}={raw!r} is not a lane number (1..{MAX_LANES})")
    return _check(int(raw))


def current_release() -> SlurmRelease:
    """The release this process's cluster runs: ``$DETHPC_DEVCLUSTER_SLURM`` (default
    22.05)."""
    return SlurmRelease.parse(os.environ.get(RELEASE_ENV))


def current_layout() -> DevClusterLayout:
    """The layout of this process's lane (``current_lane``) and release."""
    return lane_layout(current_lane(), release=current_release())


def lane_count(value: int | None = None) -> int:
    """How many lanes: ``value``, else ``$DETHPC_DEVCLUSTER_LANES``, else 2."""
    if value is None:
        raw = os.environ.get(LANES_ENV, "").strip()
        if raw and not raw.isdigit():
            raise ValueError(f"${LANES_ENV}={raw!r} is not a number of lanes")
        value = int(raw) if raw else DEFAULT_LANES
    return _check(value)


def lane_env(layout: DevClusterLayout, path: str | None = None) -> dict[str, str]:
    """The variables that bind a process (and what it starts) to ``layout``'s cluster
    (its ``SLURM_CONF``, lane, release and node names); for a built release also
    ``PATH`` (its directories before ``path``, default this process's ``$PATH``)."""
    env = {"SLURM_CONF": str(layout.slurm_conf), LANE_ENV: str(layout.lane),
           RELEASE_ENV: layout.release.value, NODES_ENV: ",".join(layout.node_names)}
    if layout.path_prefix:
        rest = os.environ.get("PATH", os.defpath) if path is None else path
        env["PATH"] = path_with_first(layout.path_prefix, rest)
    return env


def existing_lanes(base: Path | None = None,
                   release: SlurmRelease = DEFAULT_RELEASE) -> list[int]:
    """The lanes of ``release`` whose state directory exists (``down`` stops each)."""
    base = base or base_dir()
    return [k for k in range(1, MAX_LANES + 1)
            if lane_layout(k, base, release).state_dir.is_dir()]
