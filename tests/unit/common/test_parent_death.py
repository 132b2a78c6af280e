"""dethpc.common.parent_death: the signal comes when the parent ends, and a parent that
ended before the request is told (real forks, in a throwaway python: none in pytest)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dethpc.common import parent_death

REPO = Path(__file__).parents[3]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")


def _run(script: str) -> str:
    """``script`` in a fresh python; its stdout, which a forked child of it may hold
    open after it exited (the run ends when every writer has closed it)."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_parent_gone_is_false_for_the_live_parent_and_for_none() -> None:
    assert parent_death.parent_gone(os.getppid()) is False
    assert parent_death.parent_gone(0) is False


@linux
def test_the_signal_comes_when_the_parent_ends() -> None:
    out = _run("""
        import os, signal
        from dethpc.common import parent_death
        parent = os.getpid()
        r, w = os.pipe()
        if os.fork() == 0:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
            alive = parent_death.die_with_parent(signal.SIGUSR1, parent)
            os.write(w, b"1")                       # armed: the parent may go
            got = signal.sigtimedwait({signal.SIGUSR1}, 30)
            print(alive, got and signal.Signals(got.si_signo).name, flush=True)
            os._exit(0)
        os.read(r, 1)
        """)
    assert out == "True SIGUSR1"


@linux
def test_a_parent_gone_before_the_request_is_told() -> None:
    out = _run("""
        import os, signal, time
        from dethpc.common import parent_death
        parent = os.getpid()
        if os.fork() == 0:
            deadline = time.monotonic() + 30
            while os.getppid() == parent and time.monotonic() < deadline:
                time.sleep(0.01)                    # the parent exits at once
            print(parent_death.die_with_parent(signal.SIGUSR1, parent),
                  parent_death.parent_gone(parent), flush=True)
            os._exit(0)
        """)
    assert out == "False True"
