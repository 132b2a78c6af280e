"""``dethpc daemon run|start|stop|status|tick``."""

from __future__ import annotations

import logging
import signal

import typer

from dethpc import service
from dethpc.cli.common import ENV, console, err_console
from dethpc.daemon import Daemon

daemon_app = typer.Typer(help="The reconcile loop that turns experiments into jobs.",
                         no_args_is_help=True)


def _daemon() -> Daemon:
    return Daemon(ENV.store, ENV.cluster, ENV.backend)


@daemon_app.command("run")
def run(until_idle: bool = typer.Option(False, help="exit when no experiment is open")) -> None:
    """Run the loop in the foreground (one daemon per DETHPC_HOME)."""
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
        d = _daemon()
        logging.info("dethpc daemon: backend %s, database %s", d.backend.name, ENV.store.url)
        d.run(until_idle=until_idle, should_stop=lambda: stopping["now"])


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
        stats = _daemon().tick()
        console.print(f"tick: {stats.experiments} open experiment(s), {stats.polled} polled, "
                      f"{stats.submitted} submitted, {stats.cancelled} cancelled")
        for e in stats.errors:
            err_console.print(f"[red]error:[/] {e}")
