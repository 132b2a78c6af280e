"""The three dev-cluster commands, shared by ``python -m dethpc.devcluster`` and
``dethpc dev cluster``.

Owns: turning ``DevCluster`` results into printed lines and exit codes
(0 ok, 1 not up / failed), and turning ``DethpcError`` into a one-line
message without a traceback.
Must not: hold cluster logic (``cluster`` does).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from dethpc.common.errors import DethpcError
from dethpc.devcluster.cluster import DevCluster


def _say(msg: str) -> None:
    print(msg, flush=True)


def _guard(fn: Callable[[], int]) -> int:
    try:
        return fn()
    except DethpcError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code or 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def up(*, force: bool = False, users: Sequence[str] = ()) -> int:
    def run() -> int:
        cluster = DevCluster(say=_say)
        timings = cluster.up(force=force, users=users)
        _say(f"ready in {timings.summary()}")
        _say(f"slurm.conf: {cluster.layout.slurm_conf}; state: {cluster.layout.state_dir}")
        return 0

    return _guard(run)


def down() -> int:
    def run() -> int:
        stopped = DevCluster(say=_say).down()
        _say("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0

    return _guard(run)


def status() -> int:
    def run() -> int:
        st = DevCluster().status()
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
        return 0 if st.ready else 1

    return _guard(run)
