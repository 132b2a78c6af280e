"""Running one command on the login node and streaming its output back.

Owns: the command line sent (the far side's ``dethpc`` under a small ``sh`` wrapper
that ends the command when the channel's input closes: Ctrl-C here, or a dropped
connection), copying stdout and stderr as they arrive, and the exit status.
Must not: open a connection (``ssh`` does) or know any dethpc command's arguments.
"""

from __future__ import annotations

import select
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

import paramiko

from dethpc.surfaces.remote.target import RemoteError

# The command runs in the background with /dev/null as its input; a watcher reads the
# channel's input (fd 3) and sends SIGTERM when it closes. The script's exit status is
# the command's. The far dethpc reads no remote.yaml (a call never hops on).
WRAPPER = ('DETHPC_REMOTE_CONFIG=/dev/null; export DETHPC_REMOTE_CONFIG; '
           'exec 3<&0; "$@" </dev/null & p=$!; '
           '(cat <&3 >/dev/null 2>&1; kill -TERM "$p" 2>/dev/null) & w=$!; '
           'wait "$p"; rc=$?; kill "$w" 2>/dev/null; exit "$rc"')


def command_line(prefix: str, args: list[str]) -> str:
    """The remote shell's command: ``prefix`` (the far side's dethpc, shell words
    as configured) followed by ``args``, each quoted."""
    words = shlex.split(prefix)
    if not words:
        raise RemoteError("remote.command is empty; expected how to run dethpc on the "
                          "login node (default: dethpc)")
    return shlex.join(["sh", "-c", WRAPPER, "sh", *words, *args])


def run(transport: paramiko.Transport, line: str, *, out: BinaryIO | None = None,
        err: BinaryIO | None = None) -> int:
    """Run ``line`` on the far side; copy its output as it comes; its exit status (130
    after Ctrl-C here, which ends the far command).

    Ctrl-C only sets a flag that the copying loop reads between reads (at least every
    0.1 s): a KeyboardInterrupt raised inside paramiko, between a lock's acquire and its
    release, could leave the channel locked and the CLI hanging after Ctrl-C."""
    out = out or sys.stdout.buffer
    err = err or sys.stderr.buffer
    try:
        ch = transport.open_session(timeout=20)
        ch.exec_command(line)
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise RemoteError(f"could not start the command on the login node ({exc})") from None
    try:
        with _interrupt_flag() as interrupted:
            code = _pump(ch, out, err, interrupted)
        if code is not None:
            return code
        ch.shutdown_write()  # the far watcher sees EOF and ends the command
        deadline = time.monotonic() + 5
        while not ch.exit_status_ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        return 130
    finally:
        ch.close()


@contextmanager
def _interrupt_flag() -> Iterator[threading.Event]:
    """An event set by SIGINT while the block runs (the handler is only replaced in the
    main thread, where Python delivers signals; elsewhere the event stays unset)."""
    flag = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.signal(signal.SIGINT, lambda *_: flag.set())
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def _pump(ch: paramiko.Channel, out: BinaryIO, err: BinaryIO,
          interrupted: threading.Event) -> int | None:
    """Copy until the far command exits (its status) or ``interrupted`` is set (None)."""
    while True:
        if interrupted.is_set():
            return None
        moved = False
        if ch.recv_ready():
            out.write(ch.recv(65536))
            out.flush()
            moved = True
        if ch.recv_stderr_ready():
            err.write(ch.recv_stderr(65536))
            err.flush()
            moved = True
        if moved:
            continue
        if ch.exit_status_ready() and not ch.recv_ready() and not ch.recv_stderr_ready():
            break
        t = ch.get_transport()
        if ch.closed or t is None or not t.is_active():
            # The far side sends the exit status and then closes the channel: both may
            # land between the check above and this one. Lost only without a status.
            if ch.exit_status_ready():
                continue
            raise RemoteError("the connection to the login node was lost")
        select.select([ch], [], [], 0.1)
    while ch.recv_ready():  # what arrived with the exit status
        out.write(ch.recv(65536))
    while ch.recv_stderr_ready():
        err.write(ch.recv_stderr(65536))
    out.flush()
    err.flush()
    return ch.recv_exit_status()


def capture(transport: paramiko.Transport, line: str,
            timeout_s: float = 60) -> tuple[int, str, str]:
    """Run ``line``; its exit status, stdout and stderr (for short commands)."""
    try:
        ch = transport.open_session(timeout=20)
        ch.settimeout(timeout_s)
        ch.exec_command(line)
        stdout = ch.makefile("rb").read().decode(errors="replace")
        stderr = ch.makefile_stderr("rb").read().decode(errors="replace")
        return ch.recv_exit_status(), stdout, stderr
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise RemoteError(f"the login node did not answer ({exc})") from None
