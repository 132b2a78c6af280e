"""The TensorBoard task's process: derive event files, serve them on a Unix socket,
refresh while serving, stop when idle.

Owns: ``python -m dethpc.surfaces.tasks.tbserve`` (started by ``dethpc tensorboard start`` in the
background on the login node, or by a ``--slurm`` job's script). It never opens the
store: the CLI records the task; this process only reads trials' ``metrics.jsonl``
(``dethpc.surfaces.tasks.derive``) and writes under its own 0700 directory.

Security: the real ``tensorboard`` package's app is served by werkzeug's threaded
server bound to a Unix socket (``unix://``) inside the task's owner-only directory
(0700; the socket itself 0600): another user's ``connect`` fails with EACCES, and
``ssh -L PORT:SOCKET login`` forwards a workstation's port to it. No TCP port is opened.

Idle: every HTTP request stamps the time; after ``--idle-timeout`` seconds without one
(0: never) the server shuts down, removes its socket and exits 0. SIGTERM does the same.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dethpc.surfaces.tasks.derive import Deriver, Source


class Activity:
    """The time of the last HTTP request (monotonic)."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def wrap(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        def wrapped(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            self.last = time.monotonic()
            return app(environ, start_response)
        return wrapped


def server_class(socket_path: Path, activity: Activity) -> Any:
    """A ``TensorBoardServer`` factory: werkzeug's threaded server on ``socket_path``."""
    from tensorboard.program import TensorBoardServer
    from werkzeug import serving

    class UnixSocketServer(serving.ThreadedWSGIServer, TensorBoardServer):  # type: ignore[misc]
        daemon_threads = True

        def __init__(self, wsgi_app: Any, flags: Any) -> None:
            old = os.umask(0o177)          # the socket is created 0600
            try:
                serving.ThreadedWSGIServer.__init__(
                    self, f"unix://{socket_path}", 0, activity.wrap(wsgi_app),
                    handler=_QuietHandler)
            finally:
                os.umask(old)

        def get_url(self) -> str:
            return f"unix://{socket_path}"

        def print_serving_message(self) -> None:
            print(f"TensorBoard serving on {self.get_url()}", file=sys.stderr, flush=True)

    return UnixSocketServer


def _quiet_handler() -> Any:
    from werkzeug.serving import WSGIRequestHandler

    class Quiet(WSGIRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    return Quiet


_QuietHandler: Any = None


def serve(socket_path: Path, logdir: Path, sources: list[Source], *, idle_timeout_s: float,
          refresh_s: float) -> int:
    """Derive, serve and refresh until idle or SIGTERM; the exit code."""
    global _QuietHandler
    from tensorboard import program

    _QuietHandler = _quiet_handler()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    deriver = Deriver(logdir, sources)
    print(f"derived {deriver.refresh()} points", file=sys.stderr, flush=True)
    activity = Activity()
    tb = program.TensorBoard(server_class=server_class(socket_path, activity))
    tb.configure(argv=["tensorboard", "--logdir", str(logdir), "--load_fast", "false",
                       "--reload_interval", str(max(1, int(refresh_s)))])
    server = tb._make_server()  # noqa: SLF001 - main() would print and install handlers
    stop = threading.Event()

    def shutdown(reason: str) -> None:
        if not stop.is_set():
            stop.set()
            print(f"stopping: {reason}", file=sys.stderr, flush=True)
            threading.Thread(target=server.shutdown, daemon=True).start()

    def background() -> None:
        while not stop.wait(min(refresh_s, 1.0)):
            if idle_timeout_s and time.monotonic() - activity.last > idle_timeout_s:
                shutdown(f"no request for {idle_timeout_s:g} s")
            elif time.monotonic() - getattr(background, "at", 0.0) >= refresh_s:
                background.at = time.monotonic()  # type: ignore[attr-defined]
                try:
                    deriver.refresh()
                except Exception as exc:  # noqa: BLE001 - keep serving what exists
                    print(f"refresh failed: {exc}", file=sys.stderr, flush=True)

    background.at = time.monotonic()  # type: ignore[attr-defined]
    signal.signal(signal.SIGTERM, lambda *_: shutdown("SIGTERM"))
    threading.Thread(target=background, daemon=True).start()
    server.print_serving_message()
    try:
        server.serve_forever()
    finally:
        stop.set()
        server.server_close()
        deriver.close()
        socket_path.unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dethpc.surfaces.tasks.tbserve")
    p.add_argument("--socket", required=True, type=Path)
    p.add_argument("--logdir", required=True, type=Path)
    p.add_argument("--idle-timeout", type=float, default=3600.0)
    p.add_argument("--refresh", type=float, default=10.0)
    p.add_argument("--source", action="append", default=[], type=Source.from_arg)
    a = p.parse_args(argv)
    return serve(a.socket, a.logdir, a.source, idle_timeout_s=a.idle_timeout,
                 refresh_s=a.refresh)


if __name__ == "__main__":
    sys.exit(main())
