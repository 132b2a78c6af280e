"""``dethpc daemon run|start|stop|status|tick``."""

from __future__ import annotations

import logging
import signal
import time

import typer

from dethpc.control import service
from dethpc.control.daemon import Daemon
from dethpc.control.lease import Lease
from dethpc.surfaces.cli.common import ENV, console, err_console

daemon_app = typer.Typer(help="The reconcile loop that turns experiments into jobs.",
                         no_args_is_help=True)


def _daemon(lease: Lease | None = None) -> Daemon:
    """On a shared database, the daemon acts on its own user's experiments only, even
    when its role may see everyone's (an admin's)."""
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
        if not lease.acquire():
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
