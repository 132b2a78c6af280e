"""The ``workers`` setting (the worker pool), as an experiment's ``slurm.workers`` and as
a resource pool's ``workers`` in the cluster config: one parser for both.

Owns: ``parse_workers``. Accepted forms: ``true``/``false``; an integer (that many
workers, enabled; 0 means off); a mapping with ``enabled``, ``count``, ``preload``,
``heartbeat_s``, ``lease_timeout_s``, ``idle_exit_s`` (a mapping without ``enabled``
enables the pool).
Must not: decide whether an experiment can run in a pool (``dethpc.jobs.worker_pool_items``).
"""

from __future__ import annotations

import re
from typing import Any

from dethpc.config._check import Checker, is_int, join, show
from dethpc.config.model import WorkerPool

KEYS = ("enabled", "count", "preload", "heartbeat_s", "lease_timeout_s", "idle_exit_s")
#: a dotted module name (``torch``, ``torch.nn``, ``my_pkg.model``), or ``module:function``
#: (``torch.cuda:init``: called in a spare process forked ahead of each trial)
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
                     r"(:[A-Za-z_][A-Za-z0-9_]*)?$")


def parse_workers(ck: Checker, value: Any, path: str) -> WorkerPool | None:
    """The setting at ``path``; None when absent (the caller's default applies)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return WorkerPool(enabled=value)
    if is_int(value):
        if value < 0:
            ck.error(path, f"expected true, false, a number of workers >= 0 or a mapping, "
                           f"got {show(value)}")
            return None
        return WorkerPool(enabled=value > 0, count=int(value))
    if not isinstance(value, dict):
        ck.error(path, f"expected true, false, a number of workers or a mapping with "
                       f"{', '.join(KEYS)}; got {show(value)}")
        return None
    ck.keys(value, path, KEYS)
    default = WorkerPool()
    preload = value.get("preload")
    modules = default.preload if preload is None else ck.string_list(
        preload, join(path, "preload"), nonempty=True)
    for i, name in enumerate(modules):
        if not _MODULE.match(name):
            ck.error(join(join(path, "preload"), i),
                     "expected a module name such as torch or my_pkg.model, or "
                     f"module:function such as torch.cuda:init, got {show(name)}")
    heartbeat = float(ck.number(value.get("heartbeat_s"), join(path, "heartbeat_s"),
                                default.heartbeat_s, above=0))
    timeout = float(ck.number(value.get("lease_timeout_s"), join(path, "lease_timeout_s"),
                              default.lease_timeout_s, above=0))
    if timeout < 3 * heartbeat:
        ck.error(join(path, "lease_timeout_s"),
                 f"{timeout:g} is less than 3 heartbeats ({3 * heartbeat:g} s): a live "
                 "worker would lose its lease; raise it or lower heartbeat_s")
    return WorkerPool(
        enabled=ck.boolean(value.get("enabled"), join(path, "enabled"), True),
        count=int(ck.integer(value.get("count"), join(path, "count"), 0, minimum=0)),
        preload=tuple(modules),
        heartbeat_s=heartbeat,
        lease_timeout_s=timeout,
        idle_exit_s=float(ck.number(value.get("idle_exit_s"), join(path, "idle_exit_s"),
                                    default.idle_exit_s, minimum=0)),
    )
