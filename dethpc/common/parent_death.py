"""A process that must not outlive its parent: the pool worker under its job's batch
shell, and the worker's forked trials and spares under the worker.

Slurm ends a job by signalling the processes its proctrack plugin tracks; with
proctrack/linuxproc (the dev cluster, some sites) a process whose parent died first is
reparented to PID 1 and can escape that, and nothing at all signals the children of a
process that was SIGKILLed. So such a process asks the kernel itself:
``die_with_parent`` sets ``prctl(PR_SET_PDEATHSIG, sig)`` (Linux sends ``sig`` when the
parent *thread* that forked it ends; kept across ``execve``, not inherited by a
``fork``-ed child) and says whether the parent it expected is still its parent: one that
died before the call sends nothing, ever. ``parent_gone`` is the cheap poll for a loop
(``os.getppid()`` is no longer the parent recorded at the start): it covers that race
and systems without ``prctl``.

Owns: ``set_death_signal``, ``die_with_parent``, ``parent_gone``.
Must not: import anything beyond the standard library (a forked trial calls it between
``fork`` and its own code), or decide what a process does when its parent is gone (its
caller does: the worker stops as on SIGTERM, a spare leaves).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable

#: ``<linux/prctl.h>``
PR_SET_PDEATHSIG = 1


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` (looked up once: a process that forks looks it up before), or
    None off Linux or where it cannot be found."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                   ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


def set_death_signal(sig: signal.Signals) -> bool:
    """Ask for ``sig`` when this process's parent ends; False where that cannot be asked
    (not Linux, no ``prctl``): then only ``parent_gone`` tells."""
    fn = _prctl()
    return fn is not None and fn(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def parent_gone(parent: int) -> bool:
    """``parent`` (a pid recorded earlier; 0: none) is no longer this process's parent:
    it ended and this process was reparented (to PID 1 or a subreaper)."""
    return parent > 0 and os.getppid() != parent


def die_with_parent(sig: signal.Signals, parent: int) -> bool:
    """``set_death_signal(sig)``, then whether ``parent`` is still this process's
    parent. False: it ended before the request took hold, no signal will come, the
    caller acts now."""
    set_death_signal(sig)
    return not parent_gone(parent)
