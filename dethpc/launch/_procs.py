"""Running launcher children: signal forwarding, rank-prefixed output, supervision.

Owns: ``run_workers`` (start N processes, prefix each output line with
``[rank=N]``, forward SIGTERM/SIGINT/SIGUSR1/SIGUSR2 to every child, and when
one worker fails take the others down and return its exit code), ``run_one``
(the same for a single child such as ``srun`` or ``torchrun``, optionally
without prefixing) and the launcher's logger.
Must not: decide what to run (the launchers do) or read Slurm variables.
Signal handlers only forward the signal: no other work happens in them.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import BinaryIO

from dethpc.common.errors import DethpcError
from dethpc.common.exitcodes import EXIT_PREEMPTED, EXIT_STOPPED
from dethpc.common.jobenv import ENV_LAUNCH_LOG
from dethpc.launch._common import LaunchPlan, WorkerSpec

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
#: exit codes that mean "checkpointed and stopped on purpose": the others may
#: still be finishing the same checkpoint, so they are not killed for it
CLEAN_STOP_CODES = frozenset({0, EXIT_PREEMPTED, EXIT_STOPPED})
#: seconds the other workers get after SIGTERM before SIGKILL
KILL_GRACE_S = 10.0

log = logging.getLogger("dethpc.launch")


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the *current* ``sys.stderr`` (which tests and wrappers may swap)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def setup_logging() -> None:
    if not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("[dethpc.launch] %(message)s"))
        log.addHandler(handler)
        log.setLevel(os.environ.get(ENV_LAUNCH_LOG, "INFO").upper())
        log.propagate = False


def launcher_main(main: Callable[[], int]) -> int:
    """Run a launcher's ``main``; an expected failure is one message and exit code 2."""
    setup_logging()
    try:
        return main()
    except DethpcError as exc:
        log.error("%s", exc)
        return 2


def exit_code(returncode: int) -> int:
    """Popen's returncode (negative = killed by a signal) as a shell-style exit code."""
    return 128 - returncode if returncode < 0 else returncode


def execute(plan: LaunchPlan) -> int:
    """Carry out a plan: replace this process, supervise one child, or run local workers."""
    for line in plan.notes:
        log.info("%s", line)
    for path, content in plan.files:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(content)
    if plan.kind == "exec":
        log.debug("exec %s", plan.argv)
        os.execvpe(plan.argv[0], list(plan.argv), dict(plan.env))  # noqa: S606 - argv list
    return run_workers(plan.workers)


def run_one(argv: Sequence[str], env: Mapping[str, str], rank: int | None = None,
            label: str = "") -> int:
    """Run one child, forwarding signals; prefix its output when ``rank`` is given."""
    spec = WorkerSpec(argv, env, rank if rank is not None else 0, prefix=rank is not None,
                      label=label)
    return run_workers([spec])


def run_workers(specs: Sequence[WorkerSpec]) -> int:
    """Start every worker, supervise them, and return the job's exit code.

    A worker exiting with a code outside ``CLEAN_STOP_CODES`` takes the job
    down: its rank and code are logged, the others get SIGTERM, then SIGKILL
    after ``KILL_GRACE_S``. The result is the first failure's code, else the
    first non-zero clean-stop code (80/81), else 0.
    """
    lock = threading.Lock()
    procs: list[subprocess.Popen[bytes]] = []
    pumps: list[threading.Thread] = []
    done: queue.Queue[tuple[int, int]] = queue.Queue()
    previous = _forward_signals(procs)
    try:
        for index, spec in enumerate(specs):
            proc = _start(spec)
            procs.append(proc)
            if spec.prefix:
                pumps += _pump(proc, spec.rank, lock, spec.label)
            _watch(proc, index, done)
        code = _supervise(specs, procs, done)
    finally:
        _restore_signals(previous)
    for pump in pumps:
        pump.join()
    return code


def _start(spec: WorkerSpec) -> subprocess.Popen[bytes]:
    pipe = subprocess.PIPE if spec.prefix else None
    return subprocess.Popen(list(spec.argv), env=dict(spec.env), stdout=pipe, stderr=pipe)


def _supervise(
    specs: Sequence[WorkerSpec],
    procs: list[subprocess.Popen[bytes]],
    done: queue.Queue[tuple[int, int]],
) -> int:
    failure: int | None = None
    stop_code = 0
    for _ in procs:
        index, returncode = done.get()
        code = exit_code(returncode)
        rank = specs[index].rank
        if code in CLEAN_STOP_CODES:
            stop_code = stop_code or code
            continue
        if failure is None:
            failure = code
            others = [p for p in procs if p.poll() is None]
            log.error("rank %d exited with code %d; terminating the other %d worker(s)",
                      rank, code, len(others))
            _terminate(others)
    return failure if failure is not None else stop_code


def _terminate(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        _signal(proc, signal.SIGTERM)

    def killer() -> None:
        for proc in procs:
            try:
                proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal(proc, signal.SIGKILL)

    threading.Thread(target=killer, daemon=True).start()


def _watch(proc: subprocess.Popen[bytes], index: int,
           done: queue.Queue[tuple[int, int]]) -> None:
    def waiter() -> None:
        done.put((index, proc.wait()))

    threading.Thread(target=waiter, daemon=True).start()


def _pump(proc: subprocess.Popen[bytes], rank: int, lock: threading.Lock,
          label: str = "") -> list[threading.Thread]:
    threads = []
    for src, dst in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
        if src is None:
            continue
        thread = threading.Thread(target=prefix_lines, args=(src, dst, rank, lock, label),
                                  daemon=True)
        thread.start()
        threads.append(thread)
    return threads


def prefix_lines(src: BinaryIO, dst: object, rank: int, lock: threading.Lock,
                 label: str = "") -> None:
    """Copy ``src`` to ``dst`` line by line, each line prefixed with ``[rank=N] ``
    (``[LABEL rank=N] `` with a label)."""
    prefix = (f"[{label} rank={rank}] " if label else f"[rank={rank}] ").encode()
    out = getattr(dst, "buffer", dst)
    for line in iter(src.readline, b""):
        if not line.endswith(b"\n"):
            line += b"\n"
        with lock:
            out.write(prefix + line)  # type: ignore[attr-defined]
            out.flush()  # type: ignore[attr-defined]
    src.close()


# ----------------------------------------------------------------------- signals
_Handler = signal.Handlers | int | None | object


def _forward_signals(procs: list[subprocess.Popen[bytes]]) -> dict[int, _Handler]:
    """Install handlers that only forward the signal to every live child."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def forward(signum: int, _frame: FrameType | None) -> None:
        for proc in procs:
            _signal(proc, signum)

    previous: dict[int, _Handler] = {}
    for sig in FORWARDED_SIGNALS:
        previous[sig] = signal.signal(sig, forward)
    return previous


def _restore_signals(previous: dict[int, _Handler]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)  # type: ignore[arg-type]


def _signal(proc: subprocess.Popen[bytes], signum: int) -> None:
    if proc.poll() is None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass
