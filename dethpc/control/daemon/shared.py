"""What the phases of a tick share.

Owns: ``TickStats`` (the tally each phase adds to, by which ``Daemon.run`` paces itself),
``Scope`` (this daemon's owner's rows, and the open experiments a tick works on),
``Scope.open_resolved`` (each open experiment's ``Resolved``, from one read),
``Guard`` and ``LeaseLost`` (the lease, checked before every phase that polls, submits
or cancels), ``fault_point`` (the kills tests inject) and ``slurm_unreachable`` (a
failed command that means "ask again later").
Must not: call a backend, write the store, or order the phases (``loop`` does).
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from sqlmodel import col, select
from sqlmodel.sql.expression import Select, SelectOfScalar

from dethpc.common.errors import CommandError, DethpcError
from dethpc.common.runner import is_transient
from dethpc.config.model import ClusterConfig
from dethpc.control.lease import Lease
from dethpc.control.resolved import Resolved
from dethpc.store import Store
from dethpc.store.models import Experiment, ExperimentState

log = logging.getLogger(__name__)
_Q = TypeVar("_Q", SelectOfScalar[Any], Select[*tuple[Any, ...]])
OPEN_STATES = [s for s in ExperimentState if not s.is_terminal]


@dataclass
class TickStats:
    experiments: int = 0
    polled: int = 0
    submitted: int = 0
    cancelled: int = 0
    changed: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        return self.changed or self.submitted > 0 or self.cancelled > 0


@dataclass(frozen=True)
class Scope:
    """The rows this daemon acts on. On a database several users share, the daemon acts
    on its owner's experiments only (an admin's role sees everyone's rows); ``owner``
    None: every experiment the store shows."""

    owner: str | None = None

    def mine(self, query: _Q, experiment_id: Any = None) -> _Q:
        """``query`` limited to this daemon's owner's experiments (``experiment_id``: the
        column that names the experiment; None: ``query`` selects experiments)."""
        if self.owner is None:
            return query
        if experiment_id is None:
            return query.where(Experiment.owner == self.owner)
        return query.where(col(experiment_id).in_(
            select(Experiment.id).where(Experiment.owner == self.owner)))

    def open_experiments(self, store: Store) -> list[int]:
        """The ids of the open (not terminal) experiments in scope: what a tick works on."""
        with store.read() as s:
            return [e.id for e in s.exec(self.mine(select(Experiment).where(
                Experiment.state.in_(OPEN_STATES))))  # type: ignore[attr-defined]
                if e.id is not None]

    def open_resolved(self, store: Store, cluster: ClusterConfig) -> dict[int, Resolved]:
        """``open_experiments`` with each one's ``Resolved``, from one read of their rows."""
        with store.read() as s:
            return {e.id: Resolved.of(e, cluster) for e in s.exec(self._open_rows)
                    if e.id is not None}

    @cached_property
    def _open_rows(self) -> SelectOfScalar[Experiment]:
        """The open experiments' rows in scope: each tick's first read, built once."""
        return self.mine(select(Experiment).where(
            Experiment.state.in_(OPEN_STATES))  # type: ignore[attr-defined]
            .order_by(col(Experiment.id)))


class LeaseLost(DethpcError):
    """Another daemon took this one's lease over (it stalled past its deadline)."""

    def __init__(self, lease: Lease) -> None:
        now = lease.current()
        who = f"{now.host} (pid {now.pid})" if now else "nobody now"
        super().__init__(f"this daemon ({lease.holder}) lost its lease to {who}; it stops "
                         "before acting (a daemon must tick within the lease's "
                         f"{lease.ttl_s:.0f} s)")


class Guard:
    """The right to act across login nodes (``dethpc.control.lease``); ``lease`` None: the
    caller's own lock decides (tests, ``dethpc daemon tick`` under cron)."""

    def __init__(self, lease: Lease | None = None) -> None:
        self.lease = lease

    def holds(self) -> None:
        """Raise ``LeaseLost`` unless this daemon still holds its lease (renewed when
        little of it is left): checked before every poll, sbatch and scancel phase."""
        if self.lease is not None and not self.lease.ensure(margin_s=self.lease.ttl_s / 2):
            raise LeaseLost(self.lease)


def fault_point(name: str) -> None:
    """Fault injection for tests: ``DETHPC_FAULT_POINT=<name>`` SIGKILLs the daemon there."""
    if os.environ.get("DETHPC_FAULT_POINT") == name:
        log.warning("fault injection: SIGKILL at %s", name)
        os.kill(os.getpid(), signal.SIGKILL)


def slurm_unreachable(exc: DethpcError) -> bool:
    """A command failed because the controller did not answer (restarting, overloaded):
    what it was asked may or may not have happened, and asking again later is right."""
    return isinstance(exc, CommandError) and is_transient(exc.stderr, exc.stdout)
