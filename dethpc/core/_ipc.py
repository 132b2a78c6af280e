"""Object collectives between the processes of a trial without torch: a TCP star.

Owns: ``StarChief`` (rank 0: listens, one connection per worker) and
``StarWorker`` (connects to the chief, retrying until a deadline), both offering
``allgather(obj)`` and ``broadcast(obj)`` of picklable objects, and
``core_port()``, the port a job's star uses. Determined's ``DistributedContext``
has the same shape (a ZMQ broadcast server on the chief); this one needs only the
standard library, so ``dethpc.core`` keeps working where torch is absent or its
process group is not initialized.
Must not: import torch, choose ranks (``_distributed`` does), or run collectives
concurrently (every call is a synchronous round through the chief, in order).

Wire format: each message is an 8-byte big-endian length followed by a pickle.
A worker's first message is its rank. A peer that dies closes its socket; the
others then get a ``DethpcError`` instead of waiting forever, and a collective that
failed breaks the star for good: the chief closes every connection, so the surviving
workers fail too instead of taking a later message for the one they wait for.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import time
from collections.abc import Mapping
from typing import Any

from dethpc.common.errors import DethpcError
from dethpc.common.jobenv import ENV_CORE_CONNECT_TIMEOUT, ENV_CORE_PORT, ENV_DET_CHIEF_IP

#: first port of the range the launchers use (``dethpc.launch._common.PORT_BASE``)
PORT_BASE = 15000
PORT_SPAN = 17000
#: the star's port is half the span away from the job's torch rendezvous port, so
#: neither this job's nor a neighbouring job id's MASTER_PORT is ever taken
STAR_OFFSET = PORT_SPAN // 2
ENV_CONNECT_TIMEOUT = ENV_CORE_CONNECT_TIMEOUT
_HEADER = struct.Struct(">Q")
_HELLO_TIMEOUT_S = 30.0


class CollectiveError(DethpcError):
    """A peer of a collective went away or could not be reached."""


def core_port(env: Mapping[str, str], port_offset: int = 0) -> int:
    """``$DETHPC_CORE_PORT`` (+ offset), else derived from the Slurm job id."""
    explicit = env.get(ENV_CORE_PORT, "").strip()
    if explicit.isdigit():
        return int(explicit) + port_offset
    job = (env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "").strip()
    job_id = int(job) if job.isdigit() else 0
    return PORT_BASE + (job_id + STAR_OFFSET + port_offset) % PORT_SPAN


def connect_timeout(env: Mapping[str, str]) -> float:
    raw = env.get(ENV_CONNECT_TIMEOUT, "").strip()
    try:
        return float(raw) if raw else 300.0
    except ValueError as exc:
        raise DethpcError(f"{ENV_CONNECT_TIMEOUT}={raw!r} is not a number of seconds") from exc


def _send(sock: socket.socket, obj: Any, peer: str) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        sock.sendall(_HEADER.pack(len(data)) + data)
    except OSError as exc:
        raise CollectiveError(f"cannot send to {peer} in a collective: {exc} (did that "
                              "process exit or crash?)") from exc


def _recv_exact(sock: socket.socket, n: int, peer: str) -> bytes:
    chunks: list[bytes] = []
    while n:
        try:
            chunk = sock.recv(min(n, 1 << 20))
        except OSError as exc:
            raise CollectiveError(f"lost {peer} in the middle of a collective: {exc}") from exc
        if not chunk:
            raise CollectiveError(f"{peer} closed the connection in the middle of a collective "
                                  "(did that process exit or crash?)")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket, peer: str) -> Any:
    (length,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, peer))
    return pickle.loads(_recv_exact(sock, length, peer))  # noqa: S301 - our own peers


class StarChief:
    """Rank 0: accepts ``size - 1`` workers on ``port`` (all interfaces)."""

    def __init__(self, size: int, port: int, *, timeout_s: float = 300.0) -> None:
        self.size = size
        self._peers: dict[int, socket.socket] = {}
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind(("", port))
        except OSError as exc:
            server.close()
            raise CollectiveError(
                f"rank 0 cannot listen on port {port} for the distributed context: {exc}; "
                f"set {ENV_CORE_PORT} to a free port (same value on every rank)") from exc
        server.listen(max(1, size))
        deadline = time.monotonic() + timeout_s
        try:
            while len(self._peers) < size - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(1, size)) - set(self._peers))
                    raise CollectiveError(
                        f"ranks {missing} did not connect to rank 0 on port {port} within "
                        f"{timeout_s:.0f} s ({ENV_CONNECT_TIMEOUT} changes the wait)")
                server.settimeout(left)
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.settimeout(_HELLO_TIMEOUT_S)  # a stray connection must not block us
                try:
                    rank = _recv(conn, "a connecting worker")
                except (CollectiveError, pickle.UnpicklingError, EOFError, ValueError):
                    conn.close()
                    continue
                if (not isinstance(rank, int) or not 0 < rank < size
                        or rank in self._peers):
                    conn.close()
                    continue
                conn.settimeout(None)
                self._peers[rank] = conn
        except BaseException:
            self.close()
            raise
        finally:
            server.close()

    def _peer(self, rank: int) -> socket.socket:
        conn = self._peers.get(rank)
        if conn is None:
            raise CollectiveError("the distributed context is closed or broken (an earlier "
                                  "collective failed: a rank exited or crashed)")
        return conn

    def allgather(self, obj: Any) -> list[Any]:
        try:
            out = [obj] + [_recv(self._peer(r), f"rank {r}") for r in range(1, self.size)]
            for r in range(1, self.size):
                _send(self._peer(r), out, f"rank {r}")
        except CollectiveError:
            self.close()  # the survivors must fail too, not read a later message as this one
            raise
        return out

    def broadcast(self, obj: Any) -> Any:
        try:
            for r in range(1, self.size):
                _send(self._peer(r), obj, f"rank {r}")
        except CollectiveError:
            self.close()
            raise
        return obj

    def close(self) -> None:
        for conn in self._peers.values():
            conn.close()
        self._peers.clear()


class StarWorker:
    """Rank > 0: connects to the chief at ``host:port``, retrying until ``timeout_s``."""

    def __init__(self, rank: int, host: str, port: int, *, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        last: OSError | None = None
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=5.0)
                break
            except OSError as exc:
                last = exc
                if time.monotonic() > deadline:
                    raise CollectiveError(
                        f"rank {rank} could not reach rank 0 at {host}:{port} within "
                        f"{timeout_s:.0f} s: {last}; check chief_ip / ${ENV_DET_CHIEF_IP} / "
                        f"$MASTER_ADDR and {ENV_CORE_PORT}") from exc
                time.sleep(0.2)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock: socket.socket | None = sock
        _send(sock, rank, "rank 0")

    def _conn(self) -> socket.socket:
        if self._sock is None:
            raise CollectiveError("the distributed context is closed")
        return self._sock

    def allgather(self, obj: Any) -> list[Any]:
        try:
            _send(self._conn(), obj, "rank 0")
            return list(_recv(self._conn(), "rank 0"))
        except CollectiveError:
            self.close()
            raise

    def broadcast(self, obj: Any) -> Any:
        try:
            return _recv(self._conn(), "rank 0")
        except CollectiveError:
            self.close()
            raise

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def chief_address(chief_ip: str | None, env: Mapping[str, str] | None = None) -> str:
    """``chief_ip``, else ``$DET_CHIEF_IP``, ``$MASTER_ADDR``, else localhost."""
    env = os.environ if env is None else env
    return chief_ip or env.get(ENV_DET_CHIEF_IP) or env.get("MASTER_ADDR") or "127.0.0.1"
