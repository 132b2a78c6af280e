"""The daemon's lease (dethpc.control.lease) on a real SQLite store with a clock the test moves:
one holder at a time, renewal, release, take-over after the deadline, a lost lease
noticed before acting, and two first-time takers at once (threads) of which one wins."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from dethpc.control.lease import VIEW_MARK, Lease, view_holder
from dethpc.store import Store


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'db.sqlite'}")


def lease(store: Store, clock: Clock, who: str, ttl: float = 60.0) -> Lease:
    return Lease(store, "alice", ttl_s=ttl, holder=f"{who}:1:x", clock=clock)


def test_one_holder_then_takeover_after_the_deadline(store: Store) -> None:
    clock = Clock()
    a, b = lease(store, clock, "login1"), lease(store, clock, "login2")
    assert a.acquire() and not b.acquire()
    holder = b.current()
    assert holder is not None and (holder.host, holder.pid) == ("login1", "1")
    clock.now += 59
    assert a.renew() and not b.acquire()          # renewed: still a's
    clock.now += 61                               # a died: no renewal for the ttl
    assert b.acquire()
    assert not a.renew() and not a.ensure()       # a wakes up: it must not act
    assert b.current() is not None and b.current().host == "login2"  # type: ignore[union-attr]


def test_release_lets_the_other_in_at_once(store: Store) -> None:
    clock = Clock()
    a, b = lease(store, clock, "login1"), lease(store, clock, "login2")
    assert a.acquire()
    a.release()
    assert a.current() is None and b.acquire()


def test_ensure_renews_only_when_little_is_left(store: Store) -> None:
    clock = Clock()
    a = lease(store, clock, "login1")
    assert a.acquire() and a.expires_at == 1060
    clock.now += 10
    assert a.ensure(margin_s=30) and a.expires_at == 1060     # 50 s left: no write
    clock.now += 25
    assert a.ensure(margin_s=30) and a.expires_at == 1095     # 25 s left: renewed


def test_users_have_their_own_leases(store: Store) -> None:
    clock = Clock()
    assert lease(store, clock, "login1").acquire()
    assert Lease(store, "bob", holder="login2:2:y", clock=clock).acquire()


def test_two_first_takers_at_once_one_wins(store: Store) -> None:
    clock = Clock()
    results: list[bool] = []
    barrier = threading.Barrier(4)

    def take(who: str) -> None:
        contender = lease(store, clock, who)
        barrier.wait()
        results.append(contender.acquire())

    threads = [threading.Thread(target=take, args=(f"login{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == [False, False, False, True], results


def test_a_daemon_that_lost_its_lease_stops_before_acting(store: Store, tmp_path: Path) -> None:
    from dethpc.backends.local import LocalBackend
    from dethpc.config.model import ClusterConfig
    from dethpc.control.daemon import Daemon, LeaseLost

    clock = Clock()
    a, b = lease(store, clock, "login1"), lease(store, clock, "login2")
    assert a.acquire()
    d = Daemon(store, ClusterConfig(runs_root=tmp_path / "runs"),
               LocalBackend(tmp_path / "spool"), lease=a)
    d.tick()                                  # holds it: ticks
    clock.now += 120                          # stalled past its deadline; b takes over
    assert b.acquire()
    with pytest.raises(LeaseLost, match="lost its lease to login2"):
        d.tick()
    assert d.run(max_ticks=5) == 0            # the loop stops at once


def test_a_dead_holder_on_this_host_is_taken_over_at_once(store: Store) -> None:
    """A daemon SIGKILLed and restarted on one login node does not wait for the deadline;
    a live holder here, or any holder elsewhere, is waited for."""
    import os
    import socket

    host, no_such_pid = socket.gethostname(), 4194304   # above Linux's largest pid_max
    clock = Clock()
    assert Lease(store, "alice", holder=f"{host}:{no_such_pid}:z", clock=clock).acquire()
    assert lease(store, clock, host).acquire()                            # at once
    assert Lease(store, "bob", holder=f"{host}:{os.getpid()}:q", clock=clock).acquire()
    assert not Lease(store, "bob", holder=f"{host}:{no_such_pid}:y", clock=clock).acquire()
    assert Lease(store, "carol", holder=f"elsewhere:{no_such_pid}:z", clock=clock).acquire()
    assert not Lease(store, "carol", holder=f"{host}:1:w", clock=clock).acquire()  # not here


def test_a_starting_daemon_waits_for_a_view_but_not_for_a_daemon(store: Store) -> None:
    """``acquire_past_views``: a view's catch-up holds the lease for a poll's time; a
    daemon starting meanwhile waits for it and then holds the lease. Held by another
    daemon: False at once. A view that never lets go: False after ``wait_s``."""
    clock = Clock()
    view = Lease(store, "alice", holder=f"login1:7:v{VIEW_MARK}", clock=clock)
    daemon = lease(store, clock, "login1")
    assert view.acquire()
    waits: list[float] = []

    def sleep(s: float) -> None:          # the view ends its read after three waits
        waits.append(s)
        clock.now += s
        if len(waits) == 3:
            view.release()

    assert daemon.acquire_past_views(wait_s=10, sleep=sleep) and len(waits) == 3
    other = lease(store, clock, "login2")
    assert not other.acquire_past_views(wait_s=10, sleep=sleep) and len(waits) == 3
    daemon.release()
    stuck = Lease(store, "alice", holder=f"login1:8:w{VIEW_MARK}", clock=clock)
    assert stuck.acquire()
    assert not other.acquire_past_views(wait_s=1, sleep=lambda s: setattr(
        clock, "now", clock.now + s))
    assert view_holder().endswith(VIEW_MARK)
