"""Process bookkeeping for the dev cluster: pid files, liveness, stopping.

Owns: reading pid files, checking that a pid is alive *and* is the program we
expect (pid reuse must never make ``down`` kill a stranger), stopping a
process with SIGTERM then SIGKILL, and finding leftovers by the owner marker
in their environment.
Must not: decide what to start or stop (``cluster`` does).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def comm(pid: int) -> str | None:
    """The process name (``/proc/<pid>/comm``), or None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def is_running(pid: int | None, program: str) -> bool:
    """True when ``pid`` exists, is not a zombie and runs ``program``."""
    if not pid or comm(pid) != program[:15]:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def running_pid(path: Path, program: str) -> int | None:
    """The pid recorded in ``path`` if that process still runs ``program``."""
    pid = read_pid(path)
    return pid if is_running(pid, program) else None


def config_arg(pid: int) -> Path | None:
    """The file a daemon was started with ``-f FILE`` on (``/proc/<pid>/cmdline``), or
    None: it reads the default config (or the process is gone)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag == b"-f" and value:
            return Path(value.decode(errors="replace"))
    return None


def wait_gone(pids: list[int], programs: dict[int, str], timeout: float) -> list[int]:
    """Wait until every pid has exited; return the ones still running at ``timeout``."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if is_running(p, programs[p])]
    return [p for p in alive if is_running(p, programs[p])]


def stop(pid: int, program: str, timeout: float = 10.0) -> bool:
    """SIGTERM ``pid`` (if it still runs ``program``), SIGKILL after ``timeout``.

    Returns True when it had to use SIGKILL.
    """
    if not is_running(pid, program):
        return False
    _signal(pid, signal.SIGTERM)
    if not wait_gone([pid], {pid: program}, timeout):
        return False
    _signal(pid, signal.SIGKILL)
    wait_gone([pid], {pid: program}, 5.0)
    return True


def terminate(pid: int, program: str) -> None:
    if is_running(pid, program):
        _signal(pid, signal.SIGTERM)


def kill(pid: int, program: str) -> None:
    if is_running(pid, program):
        _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def marked_processes(env_name: str, value: str) -> dict[int, str]:
    """Processes whose environment holds ``env_name=value``: ``{pid: comm}``."""
    needle = f"{env_name}={value}".encode()
    found: dict[int, str] = {}
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            name = comm(int(entry.name))
            if name:
                found[int(entry.name)] = name
    return found


def _links_into(pid: int, root: str) -> bool:
    """True when the cwd or an open file of ``pid`` lies under ``root``."""
    base = Path(f"/proc/{pid}")
    prefix = root.rstrip("/") + "/"
    try:
        if os.readlink(base / "cwd").startswith(prefix):
            return True
        for fd in (base / "fd").iterdir():
            try:
                if os.readlink(fd).startswith(prefix):
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[-1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def step_daemons(state_dir: str) -> dict[int, str]:
    """slurmstepd processes of our slurmd (they hold our spool/log files open) and
    everything they spawned (the job's tasks): ``{pid: comm}``.

    slurmd starts slurmstepd with a clean environment, so the owner marker does
    not reach it; its open files do.
    """
    steps = [int(e.name) for e in Path("/proc").iterdir()
             if e.name.isdigit() and comm(int(e.name)) == "slurmstepd"
             and _links_into(int(e.name), state_dir)]
    children = _children_map()
    found: dict[int, str] = {}
    todo = list(steps)
    while todo:
        pid = todo.pop()
        name = comm(pid)
        if name is None or pid in found:
            continue
        found[pid] = name
        todo.extend(children.get(pid, []))
    return found
