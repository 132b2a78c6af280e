"""Run a Python target as ``__main__`` and end the process without a teardown race.

``python -m dethpc.launch._run_main script.py args`` (or ``-m module args``)
behaves like ``python script.py args``: same ``sys.argv``, ``sys.path[0]``,
``__main__``, exit status, tracebacks, atexit handlers and non-daemon threads.
What differs is the very end. CPython 3.11-3.13 ends every thread that takes
the GIL once interpreter finalization has begun with ``pthread_exit``; in a
thread started by C++ (torch's gloo ``runLoop``, NCCL watchdogs, future
callbacks) that unwinding crosses a ``noexcept`` frame and the runtime calls
``std::terminate``: "terminate called without an active exception", exit 134,
after a distributed training that finished. Whether it happens depends on
which thread wins the race between the script's last line and finalization
(``tests/slurm/scripts/gil_at_exit.py`` forces the bad order).

So, after the script: non-daemon threads are joined and atexit handlers run
(as finalization would), the script's namespace is released and collected
while the interpreter is fully alive (its ``__del__`` methods run, process
groups are destroyed and their threads joined), standard streams are flushed,
and then, only if threads that Python did not start are still alive, the
process ends with ``os._exit`` instead of entering finalization. A script
with no such threads finalizes normally. Failures keep their codes: an
uncaught exception is printed by ``sys.excepthook`` and exits 1, a
KeyboardInterrupt ends by SIGINT, a real abort is still 134.

Owns: that sequence. Must not: start ranks or touch rank variables (``_worker``).
"""

from __future__ import annotations

import atexit
import gc
import os
import runpy
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from dethpc.common.jobenv import ENV_RUN_MAIN_DEBUG

MODULE = "dethpc.launch._run_main"
DEBUG_ENV = ENV_RUN_MAIN_DEBUG  # set: say when the process ends by os._exit
USAGE = "usage: python -m dethpc.launch._run_main (script.py | -m module) [args]"


def guarded_argv(python: str, target: Sequence[str]) -> list[str]:
    """``python -m dethpc.launch._run_main <target...>`` (target: ``script.py …``/``-m mod …``)."""
    return [python, "-m", MODULE, *target]


def exit_code(exc: SystemExit) -> int:
    """The status CPython gives ``raise SystemExit(exc.code)`` (a message is printed first)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def foreign_threads(task_dir: Path = Path("/proc/self/task"), settle_s: float = 0.05) -> int:
    """How many live threads of this process Python did not start (0 where unknown).

    A thread Python has just joined may linger for a moment in ``task_dir``:
    a non-zero count is read again once after ``settle_s``.
    """
    count = _foreign_count(task_dir)
    if count:
        time.sleep(settle_s)
        count = _foreign_count(task_dir)
    return count


def _foreign_count(task_dir: Path) -> int:
    try:
        tids = {entry.name for entry in task_dir.iterdir()}
    except OSError:
        return 0
    known = {str(t.native_id) for t in threading.enumerate() if t.native_id is not None}
    known.add(str(threading.get_native_id()))
    return len(tids - known)


def run_target(target: Sequence[str]) -> tuple[int, BaseException | None]:
    """Run the target as ``__main__``; return its exit status and an uncaught error."""
    if not target or (target[0] == "-m" and len(target) < 2):
        print(USAGE, file=sys.stderr)
        return 2, None
    try:
        if target[0] == "-m":
            sys.argv = [target[1], *target[2:]]
            sys.path[0] = os.getcwd()  # what `python -m` puts first
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            script = target[0]
            sys.argv = [script, *target[1:]]
            sys.path[0] = str(Path(script).resolve().parent)  # what `python script.py` does
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return exit_code(exc), None
    except BaseException as exc:  # noqa: BLE001 - reported like CPython's top level
        sys.excepthook(type(exc), exc, exc.__traceback__)
        return 1, exc
    return 0, None


def wind_down() -> None:
    """What finalization does first, done while the interpreter is still whole."""
    threading_shutdown: Callable[[], None] | None = getattr(threading, "_shutdown", None)
    if threading_shutdown is not None:
        threading_shutdown()  # join non-daemon threads, as `python script.py` would
    atexit._run_exitfuncs()
    gc.collect()  # the script's namespace and its cycles (DDP, process groups) go now
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def main(argv: Sequence[str] | None = None) -> int:
    code, error = run_target(list(sys.argv[1:] if argv is None else argv))
    wind_down()
    if isinstance(error, KeyboardInterrupt):  # like CPython: die by SIGINT, the parent sees it
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    foreign = foreign_threads()
    if foreign:
        if os.environ.get(DEBUG_ENV):
            print(f"[dethpc.launch] {foreign} thread(s) not started by Python are alive: "
                  f"exiting {code} without interpreter finalization", file=sys.stderr, flush=True)
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
