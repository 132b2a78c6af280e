"""Running the daemon as a background service on a login node.

Owns: the single-daemon lock (an fcntl lock on ``$DETHPC_HOME/daemon.lock``,
held for the daemon's life, so two daemons never tick the same database), the
pidfile, ``start`` (detached ``dethpc daemon run`` with its log in
``$DETHPC_HOME/daemon.log``, under its supervisor ``dethpc.common.supervisor``, which
starts it again with back-off when it is killed or crashes: docs/reliability.md),
``prestart`` (the same process started at a command's
first line, so that its start overlaps the command's own; ``start`` or ``launch`` adopts
it, and it is stopped when the command exits without having done so), ``launch`` (a
start that does not wait for the daemon's lock), ``stop`` (the supervisor
first, so nothing comes back) and ``status``, and
``wake`` (the file a client touches after it changed an experiment, so that an idle
daemon ticks now).
Must not: tick (``dethpc.control.daemon`` does).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from dethpc.common.errors import DethpcError
from dethpc.common.paths import dethpc_home, make_private_dir
from dethpc.common.supervisor import EXIT_BUSY


def lock_path() -> Path:
    return dethpc_home() / "daemon.lock"


def pid_path() -> Path:
    return dethpc_home() / "daemon.pid"


def log_path() -> Path:
    return dethpc_home() / "daemon.log"


def supervisor_lock_path() -> Path:
    return dethpc_home() / "daemon-supervisor.lock"


def supervisor_pid_path() -> Path:
    return dethpc_home() / "daemon-supervisor.pid"


def wake_path() -> Path:
    return dethpc_home() / "daemon.wake"


def wake() -> None:
    """Tell this user's daemon that what it should do changed (an experiment submitted,
    paused, activated, cancelled, killed, its concurrency set): a touch of
    ``daemon.wake``, which the daemon stats between ticks, so it ticks within
    ``tick_min_s`` instead of after its idle back-off (up to ``tick_max_s``). Nothing
    when the home does not exist (no daemon of it runs); never fails: the daemon's
    next regular tick does the same work."""
    path = wake_path()
    if not path.parent.is_dir():
        return
    with contextlib.suppress(OSError):
        path.touch()


@contextlib.contextmanager
def daemon_lock(block: bool = False) -> Iterator[bool]:
    """Yields True when this process holds the daemon lock (False: another daemon runs)."""
    make_private_dir(dethpc_home())
    f: IO[str] = open(lock_path(), "a+")  # noqa: SIM115 - held for the context
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        pid_path().write_text(str(os.getpid()))
        try:
            yield True
        finally:
            with contextlib.suppress(FileNotFoundError):
                if pid_path().read_text().strip() == str(os.getpid()):
                    pid_path().unlink()
    finally:
        f.close()


def _holder(lock: Path, pidfile: Path) -> int | None:
    """The pid in ``pidfile`` while someone holds ``lock`` (-1: unreadable), else None."""
    if not lock.exists():
        return None
    with open(lock, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return int(pidfile.read_text().strip())
            except (FileNotFoundError, ValueError):
                return -1
        fcntl.flock(f, fcntl.LOCK_UN)
    return None


def running_pid() -> int | None:
    """The pid of the running daemon, or None (the lock, not the pidfile, is the truth)."""
    return _holder(lock_path(), pid_path())


def supervisor_pid() -> int | None:
    """The pid of the daemon's supervisor, or None (its lock is the truth)."""
    return _holder(supervisor_lock_path(), supervisor_pid_path())


def starting_or_running() -> bool:
    """Whether this home's daemon runs or its supervisor is there: starting it (a plain
    ``dethpc sbatch`` returns before the daemon holds its lock, ``launch``) or waiting out
    a back-off. A view does not say that no daemon runs then, nor read Slurm itself."""
    return running_pid() is not None or supervisor_pid() is not None


def _spawn(extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """The supervisor (``dethpc.common.supervisor``: standard library only, asleep in
    ``sigwaitinfo``) of a ``dethpc daemon run``, detached, both writing to the log. The
    daemon's argv is one JSON word of the supervisor's, so a process list that looks
    for ``daemon`` ``run`` finds the daemon alone."""
    make_private_dir(dethpc_home())
    env = {**os.environ, **(extra_env or {})}
    daemon = [sys.executable, "-m", "dethpc.surfaces.cli.main", "daemon", "run"]
    with open(log_path(), "ab") as log:
        return subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "dethpc.common.supervisor", "--command", json.dumps(daemon),
             "--lock", str(supervisor_lock_path()), "--pidfile", str(supervisor_pid_path()),
             "--ready-pidfile", str(pid_path())],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
            start_new_session=True, close_fds=True)


class _Prestarted:
    """The daemon this process started at its first line, until ``start`` adopts it."""

    proc: subprocess.Popen[bytes] | None = None


def prestart() -> None:
    """Start the daemon now, without waiting, unless one runs: a command that will call
    ``start`` at its end (``dethpc submit``) calls this at its first line, so that the
    daemon's start (about 2 s of imports on an idle login node) runs beside the
    command's own instead of after it. Stopped at this process's exit unless ``start``
    adopted it (a submit refused for a bad config leaves no daemon behind)."""
    if _Prestarted.proc is not None or running_pid() is not None \
            or supervisor_pid() is not None:
        return
    _Prestarted.proc = _spawn()
    atexit.register(_drop_prestarted)


def _drop_prestarted() -> None:
    proc, _Prestarted.proc = _Prestarted.proc, None
    if proc is not None and proc.poll() is None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)


def launch(wait_s: float = 120.0) -> int | None:
    """Start the daemon *without waiting* for it to take its lock, for a command whose
    work is recorded already (``dethpc sbatch``: the daemon adopts the job whenever it is
    up, issue 47 item 1): adopt the supervisor ``prestart`` started, ask one that waits out
    a back-off to start the daemon now (SIGUSR1, as ``start``), or spawn one. Returns the
    supervisor's pid when this call started it (adopted or spawned), None when a daemon or
    its supervisor was there already. Waits only for a supervisor it started to hold its
    lock (standard library only: tens of ms, and ``prestart``'s usually does already), so
    that from then on ``starting_or_running`` sees it. Nobody waits for the daemon: one
    whose very first run fails says why in ``daemon.log`` only (``start`` reports it;
    docs/reliability.md)."""
    dead = _Prestarted.proc
    if dead is not None and dead.poll() is not None:
        _Prestarted.proc = None         # a prestarted supervisor that exited: start anew
    pid, proc = _obtain_supervisor()
    return None if pid is not None or proc is None else _supervising(proc, wait_s)


def _obtain_supervisor(extra_env: dict[str, str] | None = None
                       ) -> tuple[int | None, subprocess.Popen[bytes] | None]:
    """The first half of ``start`` and ``launch``: ``(pid, None)`` when a daemon runs;
    else ``(None, proc)``, the supervisor that will start it: the one ``prestart``
    started (adopted) or one spawned now; ``(None, None)`` when a supervisor is there
    already: one waiting out a back-off is asked to start its daemon now (SIGUSR1), one
    whose pidfile cannot be read yet (starting) is left to start it."""
    proc, _Prestarted.proc = _Prestarted.proc, None
    pid = running_pid()
    if pid is not None:
        return pid, None
    if proc is not None:
        return None, proc
    keeper = supervisor_pid()
    if keeper is not None:
        if keeper > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(keeper, signal.SIGUSR1)
        return None, None
    return None, _spawn(extra_env)


def _supervising(proc: subprocess.Popen[bytes], wait_s: float) -> int | None:
    """``proc``'s pid once that supervisor holds its lock; None when it exited because
    another one holds it (that one starts the daemon)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if supervisor_pid() == proc.pid:
            return proc.pid
        if proc.poll() is not None:
            if proc.returncode == EXIT_BUSY:
                return None
            raise DethpcError(f"the daemon's supervisor exited at once (code "
                              f"{proc.returncode}); see {log_path()}")
        time.sleep(0.005)
    raise DethpcError(f"the daemon's supervisor did not take its lock within {wait_s:.0f}s; "
                      f"see {log_path()}")


def start(extra_env: dict[str, str] | None = None, wait_s: float = 120.0) -> int:
    """Start ``dethpc daemon run`` in the background unless one runs (or adopt the one
    ``prestart`` started); returns its pid.

    Waits on events: it returns as soon as the new daemon holds the lock and fails as
    soon as it exits. ``wait_s`` only bounds a daemon stuck before its lock (a hung
    home file system); it is long because a loaded 2-core login node took more than
    10 s just to import the daemon (1.6 s when idle).

    A supervisor that waits out a back-off (its daemon died) is asked to start it now
    (SIGUSR1) and waited for instead of starting a second one."""
    pid, proc = _obtain_supervisor(extra_env)
    if pid is not None:
        return pid
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        pid = running_pid()
        if pid is not None:
            return pid
        if proc is not None and proc.poll() is not None:
            if proc.returncode != EXIT_BUSY:
                raise DethpcError(f"the daemon exited at once (code {proc.returncode}); "
                                  f"see {log_path()}")
            proc = None                 # another start's supervisor won: wait for its daemon
        if proc is None and supervisor_pid() is None:
            raise DethpcError(f"the daemon's supervisor exited without starting it; "
                              f"see {log_path()}")
        time.sleep(0.05)
    raise DethpcError(f"the daemon did not take its lock within {wait_s:.0f}s; see {log_path()}")


def stop(timeout_s: float = 30.0) -> int | None:
    """SIGTERM the daemon's supervisor (it restarts nothing after, forwards the signal and
    exits once the daemon did) and the daemon (it finishes its tick), and wait for both;
    returns the daemon's pid stopped (None when none ran)."""
    keeper, pid = supervisor_pid(), running_pid()
    for target in (keeper, pid):
        if target is not None and target > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGTERM)
    if pid is not None and pid <= 0:
        pid = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if running_pid() is None and supervisor_pid() is None:
            return pid
        time.sleep(0.1)
    raise DethpcError(f"daemon {pid} (supervisor {keeper}) did not stop within "
                      f"{timeout_s:.0f}s")
