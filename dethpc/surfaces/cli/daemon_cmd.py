"""``dethpc daemon run|start|stop|status|tick``."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from dethpc.common.errors import DethpcError
from dethpc.control import service
from dethpc.control.lease import Lease
from dethpc.surfaces.cli.common import ENV, console, err_console, say_if_untracked

if TYPE_CHECKING:   # the daemon loop's imports only where a daemon is built (issue 47)
    from dethpc.control.daemon import Daemon, TickStats

daemon_app = typer.Typer(help="The reconcile loop that turns experiments into jobs.",
                         no_args_is_help=True)


def _daemon(lease: Lease | None = None) -> Daemon:
    """On a shared database, the daemon acts on its own user's experiments only, even
    when its role may see everyone's (an admin's)."""
    from dethpc.control.daemon import Daemon
    from dethpc.control.experiments import current_user

    owner = current_user() if ENV.store.role.shared else None
    return Daemon(ENV.store, ENV.cluster, ENV.backend, lease=lease, owner=owner,
                  wake=service.wake_path())


def _lease() -> Lease:
    """This user's daemon lease (``daemon_lease_s``, checked to be at least twice
    ``tick_max_s``)."""
    from dethpc.control.experiments import current_user

    return Lease(ENV.store, current_user(), ttl_s=ENV.cluster.daemon_lease_s)


def _held_elsewhere(lease: Lease) -> str:
    other = lease.current()
    if other is None:
        return "another daemon just took the lease"
    left = max(0.0, other.expires_at - time.time())
    return (f"the daemon of user {lease.owner} runs on host {other.host} (pid {other.pid}); "
            f"its lease has {left:.0f} s left and is renewed while it runs")


#: ``DETHPC_CATCH_UP=0``: a view that finds no daemon running reads nothing from Slurm
ENV_CATCH_UP = "DETHPC_CATCH_UP"


def catch_up_if_untracked() -> TickStats | None:
    """For a view (``experiment list``/``describe``) on Slurm: when no daemon of this user
    runs (none here, no live lease from another login node), what happened to the open
    experiments' jobs meanwhile is read and judged (``Daemon.catch_up``: one squeue, one
    sacct for the jobs that left the queue) under the lease, so the view is right; new
    trials still wait for a daemon. None when nothing was read: a daemon runs, the lease
    is held, the backend is local, or ``DETHPC_CATCH_UP=0``."""
    import os

    from dethpc.common.traits import BackendKind
    from dethpc.control.experiments import current_user
    from dethpc.control.lease import view_holder
    from dethpc.surfaces import views

    if os.environ.get(ENV_CATCH_UP, "1") == "0" \
            or BackendKind.parse(ENV.cluster.backend) is not BackendKind.SLURM \
            or views.daemon_running(ENV.store, current_user()):
        return None
    lease = Lease(ENV.store, current_user(), ttl_s=ENV.cluster.daemon_lease_s,
                  holder=view_holder())
    if not lease.acquire():
        return None
    try:
        return _daemon(lease).catch_up()
    except DethpcError as exc:          # Slurm did not answer: the view shows the store
        err_console.print(f"note: could not read the jobs' state from Slurm: {exc}",
                          markup=False, highlight=False)
        return None
    finally:
        lease.release()


class UntrackedLook:
    """A following view (``experiment wait``, ``trial logs -f``) while no daemon runs:
    every ``every_s`` seconds the jobs' ends are read from Slurm
    (``catch_up_if_untracked``), and the first look says on stderr that no daemon runs
    (``say_if_untracked`` for the experiment states ``states`` gives)."""

    def __init__(self, states: Callable[[], list[str]], every_s: float = 5.0) -> None:
        self.states, self.every_s = states, every_s
        self.next_at: float | None = None

    def look(self) -> None:
        if self.next_at is not None and time.monotonic() < self.next_at:
            return
        caught = catch_up_if_untracked()
        if self.next_at is None:
            say_if_untracked(self.states(), read_now=caught is not None)
        self.next_at = time.monotonic() + self.every_s


@daemon_app.command("run")
def run(until_idle: bool = typer.Option(False, help="exit when no experiment is open"),
        wait: bool = typer.Option(False, "--wait", help="when another login node's daemon "
                                  "holds the lease, wait and take over when it stops or "
                                  "dies (instead of exiting)")) -> None:
    """Run the loop in the foreground (one daemon per user, whatever the login node)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stopping = {"now": False}

    def on_term(_sig: int, _frame: object) -> None:
        stopping["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    with service.daemon_lock() as held:
        if not held:
            err_console.print(f"another daemon is running (pid {service.running_pid()})")
            raise typer.Exit(1)
        lease = _lease()
        # a view reading Slurm for a moment (catch_up_if_untracked) is waited for
        if not lease.acquire_past_views():
            if not wait:
                err_console.print(f"{_held_elsewhere(lease)}; this one exits (run it with "
                                  "--wait to take over when that one stops)")
                raise typer.Exit(1)
            logging.info("waiting for the lease: %s", _held_elsewhere(lease))
            while not lease.acquire():
                if stopping["now"]:
                    raise typer.Exit(1)
                time.sleep(min(2.0, ENV.cluster.tick_max_s))
        logging.info("dethpc daemon %s holds the lease of user %s", lease.holder, lease.owner)
        try:
            d = _daemon(lease)
            logging.info("dethpc daemon: backend %s, database %s", d.backend.name,
                         ENV.store.safe_url)
            from dethpc.control.daemon.heap import settle
            settle()   # this process is the daemon's: its start-up heap frozen
            d.run(until_idle=until_idle, should_stop=lambda: stopping["now"])
        finally:
            lease.release()


@daemon_app.command("start")
def start() -> None:
    """Start the daemon in the background unless it runs."""
    console.print(f"daemon running (pid {service.start()}); log: {service.log_path()}")


@daemon_app.command("stop")
def stop() -> None:
    """Stop the background daemon (it finishes its tick)."""
    pid = service.stop()
    console.print("no daemon running" if pid is None else f"stopped daemon {pid}")


@daemon_app.command("status")
def status() -> None:
    """Exit 0 when a daemon runs."""
    pid = service.running_pid()
    if pid is None:
        console.print("no daemon running")
        raise typer.Exit(1)
    console.print(f"daemon running (pid {pid}); log: {service.log_path()}")


@daemon_app.command("tick")
def tick() -> None:
    """One pass (for cron/scrontab); does nothing when a daemon runs."""
    with service.daemon_lock() as held:
        if not held:
            console.print("a daemon is running; skipping")
            return
        lease = _lease()
        if not lease.acquire():
            console.print(f"{_held_elsewhere(lease)}; skipping")
            return
        try:
            stats = _daemon(lease).tick_once()
        finally:
            lease.release()
        console.print(f"tick: {stats.experiments} open experiment(s), {stats.polled} polled, "
                      f"{stats.submitted} submitted, {stats.cancelled} cancelled")
        for e in stats.errors:
            err_console.print(f"[red]error:[/] {e}")
