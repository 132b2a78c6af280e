"""Which CPUs a dev cluster's daemons may run on (``taskset``).

Owns: ``CpuPinning`` -- the CPUs of the login side (slurmctld, slurmdbd: what runs on a
site's login/management host) and of the nodes (each slurmd, and so every slurmstepd and
job task it starts, which inherit its affinity), each optional; ``parse_cpus`` (a taskset
CPU list such as ``0``, ``0-1`` or ``0,2``, checked against the CPUs this process may use),
the argv prefix that starts a daemon pinned, and reading a running process's affinity.
The scale profile uses it so that the login side's CPU can be metered apart from 64+
emulated trials on a 2-core machine (issue 48).
Must not: start or signal processes (``daemons`` does), or pin anything by default: an
unpinned role (None) runs wherever the scheduler puts it, as the lanes always have.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from dataclasses import dataclass


class DaemonRole(enum.Enum):
    """Where a daemon stands on a real site."""

    #: slurmctld and slurmdbd (a site's login/management host)
    LOGIN = "login"
    #: slurmd and what it starts (the compute nodes)
    NODE = "node"


def parse_cpus(text: str, available: Sequence[int] | None = None) -> tuple[int, ...]:
    """``"0"``, ``"0-1"``, ``"0,2-3"`` -> sorted CPU numbers; each must be in
    ``available`` (default: the CPUs this process may run on)."""
    cpus: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"CPU list {text!r}: {part!r} is not a CPU number or range "
                             "(taskset's syntax: 0 | 0-1 | 0,2-3)")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"CPU list {text!r}: range {part!r} runs backwards")
        cpus.update(range(first, last + 1))
    allowed = set(os.sched_getaffinity(0) if available is None else available)
    outside = sorted(cpus - allowed)
    if outside:
        raise ValueError(f"CPU list {text!r}: CPUs {outside} are not available here; "
                         f"allowed: {cpu_list(sorted(allowed))}")
    return tuple(sorted(cpus))


def cpu_list(cpus: Sequence[int]) -> str:
    """The taskset spelling of ``cpus`` (``0,1,2`` -> ``0-2``)."""
    parts: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True)
class CpuPinning:
    """CPUs per role; None: not pinned (the default for every role)."""

    login: tuple[int, ...] | None = None
    nodes: tuple[int, ...] | None = None

    def cpus(self, role: DaemonRole) -> tuple[int, ...] | None:
        return self.login if role is DaemonRole.LOGIN else self.nodes

    def argv(self, role: DaemonRole, argv: Sequence[str]) -> list[str]:
        """``argv`` started under ``taskset -c`` when ``role`` is pinned, else as is."""
        cpus = self.cpus(role)
        return list(argv) if cpus is None else ["taskset", "-c", cpu_list(cpus), *argv]

    def differs(self, role: DaemonRole, pid: int) -> bool:
        """``pid`` runs on CPUs other than ``role``'s (False when ``role`` is unpinned or
        the process is gone)."""
        cpus = self.cpus(role)
        if cpus is None:
            return False
        have = affinity(pid)
        return have is not None and have != frozenset(cpus)

    def describe(self) -> str:
        login = "any CPU" if self.login is None else f"CPUs {cpu_list(self.login)}"
        nodes = "any CPU" if self.nodes is None else f"CPUs {cpu_list(self.nodes)}"
        return f"login side (slurmctld, slurmdbd) on {login}, nodes on {nodes}"


def affinity(pid: int) -> frozenset[int] | None:
    """The CPUs ``pid`` may run on, or None when it is gone."""
    try:
        return frozenset(os.sched_getaffinity(pid))
    except OSError:
        return None
