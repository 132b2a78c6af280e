"""One daemon per user, whatever the login node: a lease in the database.

Sites have several login nodes sharing the home directory, where ``fcntl`` locks over
NFS are not to be trusted; the database is what every daemon of a user shares. The
right to act (poll, submit, cancel) is a row of ``DaemonLease`` per owner, held by one
``host:pid:token`` until ``expires_at``:

* ``acquire`` takes a free, expired or own lease with one compare-and-set ``UPDATE``
  (``WHERE holder = me OR expires_at < now``), or ``INSERT``s the row the first time
  (two first inserters: the primary key lets one win). SQLite and PostgreSQL both make
  that single statement atomic, so two daemons never both hold it.
* The holder renews it every tick, and before acting when less than ``margin`` is left;
  a renewal that finds another holder means the lease was taken over (this daemon
  stalled past its deadline): it must stop at once, before any sbatch.
* A clean stop releases it; a holder that died is taken over after its deadline, or at
  once when it ran on this host and its process is gone (a daemon SIGKILLed and
  restarted on one login node does not wait).

Owns: ``Lease`` (acquire, renew, release, who holds it) and the rule above.
Must not: tick, submit, or decide how long a daemon waits for a lease (the caller does).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from dethpc.store import Store
from dethpc.store.models import DaemonLease

#: how long a lease lasts without renewal: longer than any tick (a daemon renews at each)
DEFAULT_TTL_S = 60.0


@dataclass(frozen=True)
class Holder:
    """Who holds a lease now, as another daemon sees it."""

    holder: str
    expires_at: float

    @property
    def host(self) -> str:
        return self.holder.split(":", 1)[0]

    @property
    def pid(self) -> str:
        parts = self.holder.split(":")
        return parts[1] if len(parts) > 1 else "?"


def me() -> str:
    """This process's holder name: ``host:pid:token`` (the token tells two processes of one
    pid apart across hosts and restarts)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _dead_here(holder: str) -> bool:
    """The holder ran on this host and its process no longer exists."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False   # alive, another user's
    return False


#: the end of a holder name that a view took (``view_holder``): a short read, not a daemon
VIEW_MARK = ":view"


def view_holder() -> str:
    """The holder name of a view that judges jobs for a moment when no daemon runs
    (``experiment list``/``describe``'s catch-up): a daemon starting meanwhile waits for
    it (``Lease.acquire_past_views``) instead of exiting."""
    return me() + VIEW_MARK


class Lease:
    def __init__(self, store: Store, owner: str, *, ttl_s: float = DEFAULT_TTL_S,
                 holder: str | None = None, clock: Callable[[], float] = time.time) -> None:
        self.store, self.owner, self.ttl_s, self.clock = store, owner, ttl_s, clock
        self.holder = holder or me()
        self.expires_at = 0.0

    def acquire(self) -> bool:
        """Take the lease if it is free, expired or ours; True when held."""
        now = self.clock()
        until = now + self.ttl_s
        with self.store.session() as s:
            res = s.exec(update(DaemonLease)  # type: ignore[call-overload]
                         .where(col(DaemonLease.owner) == self.owner)
                         .where((col(DaemonLease.holder) == self.holder)
                                | (col(DaemonLease.expires_at) < now))
                         .values(holder=self.holder, expires_at=until, acquired_at=now))
            if res.rowcount == 1:
                self.expires_at = until
                return True
            row = s.get(DaemonLease, self.owner)
            if row is not None:
                if not _dead_here(row.holder):
                    return False
                # its holder ran on this host and is gone (a daemon SIGKILLed and
                # restarted here): no need to wait for the deadline
                res = s.exec(update(DaemonLease)  # type: ignore[call-overload]
                             .where(col(DaemonLease.owner) == self.owner)
                             .where(col(DaemonLease.holder) == row.holder)
                             .values(holder=self.holder, expires_at=until, acquired_at=now))
                if res.rowcount == 1:
                    self.expires_at = until
                    return True
                return False
        try:
            with self.store.session() as s:
                s.add(DaemonLease(owner=self.owner, holder=self.holder, acquired_at=now,
                                  expires_at=until))
        except IntegrityError:
            return False   # another daemon inserted it first
        self.expires_at = until
        return True

    def acquire_past_views(self, wait_s: float = 60.0,
                           sleep: Callable[[float], None] = time.sleep) -> bool:
        """``acquire``, waiting up to ``wait_s`` while a view holds the lease (its read
        takes a poll's time); at once False while a daemon holds it."""
        deadline = self.clock() + wait_s
        while not self.acquire():
            other = self.current()
            if other is not None and not other.holder.endswith(VIEW_MARK):
                return False
            if self.clock() >= deadline:
                return False
            sleep(0.2)
        return True

    def renew(self) -> bool:
        """Extend our lease; False when another holds it now (we lost it)."""
        now = self.clock()
        until = now + self.ttl_s
        with self.store.session() as s:
            res = s.exec(update(DaemonLease)  # type: ignore[call-overload]
                         .where(col(DaemonLease.owner) == self.owner)
                         .where(col(DaemonLease.holder) == self.holder)
                         .values(expires_at=until))
            held = res.rowcount == 1
        if held:
            self.expires_at = until
        return held

    def ensure(self, margin_s: float = 5.0) -> bool:
        """Held with at least ``margin_s`` left (renewing when less is): call before acting."""
        if self.expires_at - self.clock() >= margin_s:
            return True
        return self.renew()

    def release(self) -> None:
        with self.store.session() as s:
            s.exec(update(DaemonLease)  # type: ignore[call-overload]
                   .where(col(DaemonLease.owner) == self.owner)
                   .where(col(DaemonLease.holder) == self.holder)
                   .values(holder="", expires_at=0.0))
        self.expires_at = 0.0

    def current(self) -> Holder | None:
        """The live holder (not expired, not released), whoever it is."""
        with self.store.session() as s:
            row = s.get(DaemonLease, self.owner)
            if row is None or not row.holder or row.expires_at < self.clock():
                return None
            return Holder(row.holder, row.expires_at)
