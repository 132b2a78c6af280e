"""The three dev-cluster commands, shared by ``python -m dethpc.devcluster`` and
``dethpc dev cluster``; and the same three for the scale profile (``up_scale``,
``down_scale``, ``status_scale``: ``profiles``).

Owns: which lanes a command acts on (``--lane K``, else ``$DETHPC_DEVCLUSTER_LANE``,
else every lane: ``--lanes N`` / ``$DETHPC_DEVCLUSTER_LANES`` / 2 for ``up`` and
``status``, every lane with a state directory for ``down``), turning ``DevCluster``
results into printed lines and exit codes (0 ok, 1 not up / failed), and turning
``DethpcError`` into a one-line message without a traceback.
Must not: hold cluster logic (``cluster`` and its parts do).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence

from dethpc.common.errors import DethpcError
from dethpc.devcluster.cluster import DevCluster, Timings, down_lanes, down_scale, up_lanes
from dethpc.devcluster.lanes import (
    LANE_ENV,
    RELEASE_ENV,
    current_lane,
    current_release,
    lane_count,
    lane_layout,
)
from dethpc.devcluster.layout import DevClusterLayout
from dethpc.devcluster.profiles import ScaleSpec, save_spec, saved_spec, scale_layout
from dethpc.devcluster.releases import SlurmRelease


def _say(msg: str) -> None:
    print(msg, flush=True)


def _guard(fn: Callable[[], int]) -> int:
    try:
        return fn()
    except (DethpcError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return getattr(exc, "exit_code", 1) or 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def chosen_release(slurm: str | None) -> SlurmRelease:
    """``--slurm``'s release, else ``$DETHPC_DEVCLUSTER_SLURM``'s, else 22.05."""
    return SlurmRelease.parse(slurm) if slurm else current_release()


def chosen_lanes(lane: int | None, lanes: int | None) -> list[int]:
    """``[lane]`` when one is named (``--lane``, else ``$DETHPC_DEVCLUSTER_LANE``: a
    process bound to a lane sees only its cluster), else lanes 1..``lane_count(lanes)``."""
    if lane is not None:
        return [lane_layout(lane).lane]
    if os.environ.get(LANE_ENV, "").strip():
        return [current_lane()]
    return list(range(1, lane_count(lanes) + 1))


def up(*, force: bool = False, users: Sequence[str] = (), lane: int | None = None,
       lanes: int | None = None, slurm: str | None = None) -> int:
    def run() -> int:
        release = chosen_release(slurm)
        for cluster, timings in up_lanes(chosen_lanes(lane, lanes), force=force,
                                         users=users, say=_say, release=release):
            lay = cluster.layout
            _say(f"lane {lay.lane} (Slurm {lay.release.value}) ready in {timings.summary()}")
            path = f"; PATH first: {lay.path_prefix[0]}" if lay.path_prefix else ""
            _say(f"  slurm.conf: {lay.slurm_conf} (SLURM_CONF); nodes {lay.nodelist}; "
                 f"state: {lay.state_dir}{path}")
        return 0

    return _guard(run)


def down(*, lane: int | None = None, slurm: str | None = None) -> int:
    def run() -> int:
        named = lane is not None or bool(os.environ.get(LANE_ENV, "").strip())
        only = chosen_lanes(lane, None) if named else None
        release = chosen_release(slurm) if (slurm or os.environ.get(RELEASE_ENV)
                                            or named) else None
        stopped = down_lanes(only, say=_say, release=release)
        _say("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0

    return _guard(run)


def status(*, lane: int | None = None, lanes: int | None = None,
           slurm: str | None = None) -> int:
    def run() -> int:
        ready = True
        release = chosen_release(slurm)
        for k in chosen_lanes(lane, lanes):
            lay = lane_layout(k, release=release)
            ready = _report(lay, f"lane {k}") and ready
        return 0 if ready else 1

    return _guard(run)


def _report(lay: DevClusterLayout, what: str) -> bool:
    """Print one cluster's daemons and sinfo; True when it is up."""
    st = DevCluster(lay).status()
    _say(f"== {what}: cluster {lay.cluster_name} (Slurm {lay.release.value}), "
         f"SLURM_CONF={lay.slurm_conf}, nodes {lay.nodelist}, state {lay.state_dir}")
    for d in st.daemons:
        state = f"running (pid {d.pid})" if d.running else "not running"
        owner = "" if d.ours or not d.running else " (not started by devcluster)"
        _say(f"{d.name:<12} {state}{owner}")
    _say(f"{'munge':<12} {'ok' if st.munge_ok else 'NOT answering'}")
    _say(f"{'controller':<12} {'UP' if st.controller_up else 'DOWN'}")
    if st.sinfo:
        _say(st.sinfo.rstrip())
    _say(f"cluster is {'UP' if st.ready else 'NOT up'} "
         f"({len(st.usable_nodes)}/{st.expected_nodes} nodes usable)")
    return st.ready


# ------------------------------------------------------------------ the scale profile
def up_scale(spec: ScaleSpec, *, force: bool = False, users: Sequence[str] = (),
             slurm: str | None = None) -> int:
    """Start (or repair) the scale cluster shaped as ``spec``; refused while one of
    another shape runs (its nodes beyond the new count would be left running)."""
    def run() -> int:
        release = chosen_release(slurm)
        old = saved_spec(release=release)
        if old is not None and (old.nodes, old.gpus_per_node, old.gpu_type) != (
                spec.nodes, spec.gpus_per_node, spec.gpu_type) \
                and DevCluster(scale_layout(old, release=release)).controller_up():
            raise DethpcError(
                f"the scale cluster runs with {old.nodes} nodes x {old.gpus_per_node} "
                f"{old.gpu_type}; take it down first (`python -m dethpc.devcluster down "
                f"--profile scale`), then bring it up in the new shape")
        lay = scale_layout(spec, release=release)
        save_spec(lay, spec)
        cluster = DevCluster(lay, say=_say)
        timings: Timings = cluster.up(force=force, users=users,
                                      wait_timeout=max(120.0, 4.0 * spec.nodes))
        timings.end = timings.end or time.monotonic()
        _say(f"scale cluster (Slurm {lay.release.value}) ready in {timings.summary()}")
        _say(f"  {spec.nodes} nodes {lay.nodelist} x gpu:{spec.gpu_type}:{spec.gpus_per_node}"
             f" = {spec.gpus} GPUs; {lay.pinning.describe()}")
        _say(f"  slurm.conf: {lay.slurm_conf} (export SLURM_CONF={lay.slurm_conf}); "
             f"state: {lay.state_dir}; unlimited users: "
             f"{', '.join(lay.site.unlimited_users)}")
        return 0

    return _guard(run)


def down_scale_cluster(*, slurm: str | None = None) -> int:
    def run() -> int:
        release = chosen_release(slurm) if slurm else None
        stopped = down_scale(release, say=_say)
        _say("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0

    return _guard(run)


def status_scale(*, slurm: str | None = None) -> int:
    def run() -> int:
        release = chosen_release(slurm)
        lay = scale_layout(saved_spec(release=release), release=release)
        return 0 if _report(lay, "scale") else 1

    return _guard(run)


def pyslurm_wheel(*, slurm: str | None = None) -> int:
    """Print the path of the pyslurm wheel built against ``slurm``'s build (building the
    release and the wheel once per machine); scripts/test.sh installs it."""
    def run() -> int:
        from dethpc.devcluster.lanes import lane_layout
        from dethpc.devcluster.pyslurm_build import ensure_pyslurm_wheel
        from dethpc.devcluster.slurm_build import ensure_slurm_build

        release = chosen_release(slurm)
        if not release.built:
            raise DethpcError(f"Slurm {release.value} is Debian's package; PyPI has no "
                              "pyslurm for it (choose --slurm 25.11)")
        shared = lane_layout(1, release=release).shared
        build = ensure_slurm_build(release, shared, say=_stderr)
        print(ensure_pyslurm_wheel(build, say=_stderr), flush=True)
        return 0

    return _guard(run)


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
