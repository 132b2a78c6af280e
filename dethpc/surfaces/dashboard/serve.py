"""Run the dashboard: a fresh token, a listening socket, the URL and ``ssh -L`` line, uvicorn.

Owns: checking that the ``dashboard`` extra is installed (and saying how to install it),
binding (127.0.0.1 and a free port by default: the port is known before the line is
printed), the lines printed, serving until interrupted.
Must not: decide what the pages show (``data``) or who may see them (``app``).
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from dethpc.common.errors import DethpcError
from dethpc.store import Store

INSTALL_HINT = ("the dashboard needs its optional extra: pip install 'dethpc[dashboard]' "
                "(starlette and uvicorn)")


def check_installed() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise DethpcError(f"{INSTALL_HINT}; missing: {exc.name}") from None


@dataclass(frozen=True)
class Address:
    host: str
    port: int
    token: str

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/?token={self.token}"

    def ssh_line(self, login_host: str, user: str) -> str:
        """What to run on one's own machine to reach a dashboard on ``login_host``."""
        target = "127.0.0.1" if self.host == "localhost" else self.host
        target = f"[{target}]" if ":" in target else target
        return f"ssh -N -L {self.port}:{target}:{self.port} {user}@{login_host}"


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: a free port); a clear error otherwise."""
    if not 0 <= port <= 65535:
        raise DethpcError(f"--port {port} is not allowed: 0 (a free port) to 65535")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise DethpcError(f"--host {host!r} is not an address this machine can listen "
                          f"on: {exc.strerror or exc}") from None
    family, _, _, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(sockaddr)
    except OSError as exc:
        sock.close()
        raise DethpcError(f"cannot listen on {host}:{port}: {exc.strerror or exc} "
                          "(--port 0 picks a free port)") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


@dataclass
class Running:
    """A dashboard bound and ready to serve: ``server.run(sockets=[sock])`` serves it
    (in any thread), ``server.should_exit = True`` stops it."""

    address: Address
    lines: list[str]
    server: Any
    sock: socket.socket


def prepare(store: Store, user: str, host: str = "127.0.0.1", port: int = 0) -> Running:
    """Bind, draw a fresh token, build the app and the lines to print."""
    check_installed()
    import uvicorn

    from dethpc.surfaces.dashboard.app import create_app

    sock = bind(host, port)
    addr = Address(host, sock.getsockname()[1], secrets.token_urlsafe(24))
    login = socket.getfqdn()
    if login.startswith("localhost"):   # no name in /etc/hosts: the kernel's host name
        login = socket.gethostname()
    lines = [f"dethpc dashboard (read-only) at {addr.url}",
             f"from your own machine: {addr.ssh_line(login, user)}",
             f"  then open {Address('127.0.0.1', addr.port, addr.token).url}",
             "the token is asked once, then kept in a cookie; Ctrl-C stops the dashboard"]
    if not _loopback(host):
        lines.append(f"note: listening on {host}, not 127.0.0.1: anyone who can reach it "
                     "is asked for the token, but the traffic is plain HTTP")
    app = create_app(store, user, addr.token, addr.port)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            server_header=False)
    return Running(addr, lines, uvicorn.Server(config), sock)


def serve(store: Store, user: str, host: str = "127.0.0.1", port: int = 0,
          out: TextIO = sys.stdout) -> None:
    """Serve the dashboard until interrupted, printing where and how to reach it."""
    running = prepare(store, user, host, port)
    out.write("\n".join(running.lines) + "\n")
    out.flush()
    running.server.run(sockets=[running.sock])
