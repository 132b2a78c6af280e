"""Polling and counting helpers shared by the local and Slurm backend tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dethpc.backends.base import Backend, JobInfo
from dethpc.common.runner import RecordingRunner


def wait_for(backend: Backend, refs: list[str], pred: Callable[[dict[str, JobInfo]], bool],
             what: str, deadline_s: float, interval_s: float) -> dict[str, JobInfo]:
    """Poll ``refs`` until ``pred`` holds; fail the test after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while True:
        infos = backend.poll(refs)
        if pred(infos):
            return infos
        if time.monotonic() > end:
            pytest.fail(f"gave up waiting for {what}: {infos}")
        time.sleep(interval_s)


def wait_file(path: Path, deadline_s: float, interval_s: float) -> None:
    end = time.monotonic() + deadline_s
    while not path.exists():
        if time.monotonic() > end:
            pytest.fail(f"gave up waiting for {path}")
        time.sleep(interval_s)


def submits(runner: RecordingRunner) -> int:
    """``sbatch`` calls that submitted (or tried to): ``dethpc submit``'s one
    ``sbatch --test-only`` of the first trial's job does not count."""
    return sum(1 for c in runner.calls if c and c[0].endswith("sbatch") and "--test-only" not in c)
