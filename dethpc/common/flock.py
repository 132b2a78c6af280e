"""Exclusive advisory locks on files (``fcntl.flock``), waited for.

Owns: ``flocked``, the one way dethpc holds a lock file for a block (the local
backend's spool, ``dethpc sbatch``'s submit token, the dev cluster's and the
container image's build locks), and ``held``, whether a submitter's lock is still held
(``dethpc sbatch``'s and an interactive task's).
Must not: decide where lock files live, or remove them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def flocked(path: Path, *, mode: int = 0o644) -> Iterator[int]:
    """Hold an exclusive flock on ``path`` (created with ``mode`` when missing, the
    lock waited for) for the ``with`` body; yields the descriptor. Closing it, also
    when the body raises, releases the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def held(path: Path) -> bool | None:
    """Whether another process holds an flock on ``path`` now (probed without waiting:
    the probe's own lock lasts microseconds); None when ``path`` cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
