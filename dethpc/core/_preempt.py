"""Preemption: turn a signal or a ``stop`` file into a flag read at step boundaries.

Owns: the signal handlers for ``$DETHPC_PREEMPT_SIGNAL`` (default USR2) and TERM
(they only set a flag: no I/O, no locks, nothing else in a handler), the ``stop``
file check (content ``stop`` or ``pause``), the wait at a rung for the searcher's
verdict (``await_verdict``: after a validation at a rung, the next check waits until
the daemon's ``searched`` marker reaches it or the stop file appears, at most
``$DETHPC_VERDICT_WAIT_S``, a signal included), which of a signal and a stop wins (the
searcher's ``stop`` already written: the trial is decided and leaves stopped, not
preempted), the rank-0 broadcast so every rank stops at the same step, and the exit
code the process must end with.
Must not: checkpoint or exit by itself (``init()`` exits when the context is
left), import torch, or write any file but the ``heartbeat`` it touches (at most every
``HEARTBEAT_S``: the hang watchdog's sign of life, docs/reliability.md).
"""

from __future__ import annotations

import enum
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any

from dethpc.common.errors import DethpcError
from dethpc.common.exitcodes import EXIT_PREEMPTED, EXIT_STOPPED
from dethpc.common.jobenv import ENV_PREEMPT_SIGNAL, ENV_VERDICT_WAIT_S
from dethpc.common.markers import read_searched
from dethpc.core._distributed import DistributedContext

log = logging.getLogger(__name__)

REASON_SIGNAL = "signal"
REASON_STOP = "stop"
REASON_PAUSE = "pause"

#: how often (at most) the trial looks for its ``stop`` file: one failed ``open`` (a
#: stat's cost) per step at most every 0.1 s, small next to the daemon's own part of
#: the stop path (docs/searchers.md, "Stop latency")
STOP_CHECK_INTERVAL_S = 0.1
#: how often (at most) a check touches the trial's ``heartbeat`` file: what the daemon's
#: hang watchdog counts as progress besides metrics (one ``utime`` per 10 s)
HEARTBEAT_S = 10.0
#: the longest a trial waits at a rung for the searcher's verdict on its validation
#: (``$DETHPC_VERDICT_WAIT_S``; 0: never waits). The daemon takes a validation within
#: about ``metrics_poll_s`` (0.2 s) plus its ingest; the bound only matters when no
#: daemon is reading (stopped, or busy with a long tick)
VERDICT_WAIT_S = 2.0
#: how often the wait looks at the marker and the stop file
VERDICT_POLL_S = 0.02


def dump_stacks_on(signal_name: str) -> bool:
    """Write every thread's Python stack to stderr (the trial log) when ``signal_name``
    comes (``faulthandler``: from C, so a thread blocked in a collective or a sleep is
    dumped too); False where it cannot (not the main thread, no such signal)."""
    import faulthandler

    try:
        faulthandler.register(parse_signal(signal_name), all_threads=True, chain=False)
    except (ValueError, RuntimeError, DethpcError) as exc:
        log.debug("no stack dump on SIG%s: %s", signal_name, exc)
        return False
    return True


def verdict_wait_s(raw: str | None) -> float:
    """``$DETHPC_VERDICT_WAIT_S`` as seconds (unset or bad: ``VERDICT_WAIT_S``)."""
    try:
        value = float(raw) if raw not in (None, "") else VERDICT_WAIT_S
    except ValueError:
        log.warning("%s=%r is not a number of seconds; using %s", ENV_VERDICT_WAIT_S, raw,
                    VERDICT_WAIT_S)
        return VERDICT_WAIT_S
    return max(0.0, value)


def rung_hook(validate_at: Iterable[int], length: int,
              preempt: PreemptContext) -> Callable[[int], None] | None:
    """What ``TrainContext.report_validation_metrics`` calls with the steps it reported:
    at a rung (a ``validate_at`` length short of the target ``length``) the preempt
    context waits for the verdict at its next check. None when there is no such rung."""
    rungs = frozenset(v for v in validate_at if v < length)
    if not rungs:
        return None

    def hook(steps: int) -> None:
        if steps in rungs:
            preempt.await_verdict(steps)
    return hook


class PreemptMode(enum.Enum):
    """How ranks agree on preemption (Determined's names)."""

    #: every rank calls should_preempt(); rank 0 decides and broadcasts (a collective)
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    #: every rank decides alone from its own signal and the stop file (no collective;
    #: Determined's ranks each ask the master)
    WorkersAskMaster = "WORKERS_ASK_MASTER"
    #: only rank 0 calls should_preempt(); other ranks always get False
    ChiefOnly = "CHIEF_ONLY"
    #: no handlers, no stop file: should_preempt() is always False
    ExplicitOnly = "EXPLICIT_ONLY"


def parse_signal(name: str) -> signal.Signals:
    """``USR2``, ``SIGUSR2`` or ``12`` -> ``signal.SIGUSR2``."""
    raw = name.strip().upper()
    if raw.isdigit():
        try:
            return signal.Signals(int(raw))
        except ValueError as exc:
            raise DethpcError(f"{ENV_PREEMPT_SIGNAL}={name!r} is not a signal number") from exc
    if not raw.startswith("SIG"):
        raw = "SIG" + raw
    try:
        return signal.Signals[raw]
    except KeyError as exc:
        raise DethpcError(f"{ENV_PREEMPT_SIGNAL}={name!r} is not a signal name; "
                          "use e.g. USR2, USR1 or TERM") from exc


def _drop_late_signal(signum: int, frame: FrameType | None) -> None:
    """A preemption signal that arrives after ``core.init()`` is left: nothing to do."""


class PreemptContext:
    """``should_preempt()`` / ``reason`` for one trial process."""

    def __init__(self, dist: DistributedContext, *, stop_file: Path | None,
                 signal_name: str = "USR2", mode: PreemptMode = PreemptMode.WorkersAskChief,
                 stop_check_interval_s: float = STOP_CHECK_INTERVAL_S,
                 searched_file: Path | None = None,
                 verdict_wait: float = VERDICT_WAIT_S,
                 heartbeat_file: Path | None = None) -> None:
        self._dist = dist
        self._heartbeat_file = heartbeat_file
        self._last_beat = float("-inf")
        self._stop_file = stop_file
        self._mode = mode
        self._interval = stop_check_interval_s
        self._last_stop_check = float("-inf")
        #: the daemon's ``searched`` marker, and the rung length whose verdict the next
        #: check waits for (``await_verdict``)
        self._searched_file = searched_file
        self._verdict_wait = verdict_wait
        self._awaiting: int | None = None
        self._signalled: signal.Signals | None = None
        self._reason: str | None = None
        self._acknowledged = False
        self._previous: dict[signal.Signals, Any] = {}
        if mode is not PreemptMode.ExplicitOnly:
            self._install({parse_signal(signal_name), signal.SIGTERM})

    def start(self) -> PreemptContext:
        """Determined starts its watcher thread here; dethpc's handlers are installed when
        the context is built, so this only returns the context."""
        return self

    def __enter__(self) -> PreemptContext:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.close()

    # -------------------------------------------------------------- handlers
    def _install(self, signums: set[signal.Signals]) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.warning("dethpc.core.init() called outside the main thread: preemption "
                        "signals are not handled, only the stop file is")
            return
        for signum in signums:
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only set a flag: this runs between two bytecodes of arbitrary code.
        if self._signalled is None:
            self._signalled = signal.Signals(signum)

    def close(self) -> None:
        """Give the previous handlers back, except that a preemption signal that had its
        default action (USR1/USR2/HUP: kill) is caught and dropped from now on: the
        context is left, so training is over (or the process is exiting with 80/81), and
        a late signal must not kill the process in its last moments, which turns a
        finished run into a "preempted" one that is requeued for nothing (seen on the dev
        cluster: a time-limit USR2 just after the final weights were saved). A Python
        handler, not SIG_IGN, so that programs started later do not inherit it. TERM
        keeps its default: Slurm's own kill path."""
        for signum, handler in self._previous.items():
            if handler is signal.SIG_DFL and signum is not signal.SIGTERM:
                handler = _drop_late_signal
            try:
                signal.signal(signum, handler)
            except (ValueError, TypeError):  # pragma: no cover - not main thread / C handler
                pass
        self._previous.clear()

    # --------------------------------------------------------------- queries
    def _beat(self, now: float) -> None:
        """Touch the heartbeat file, at most every ``HEARTBEAT_S``: the loop is alive."""
        if self._heartbeat_file is None or now - self._last_beat < HEARTBEAT_S:
            return
        self._last_beat = now
        try:
            self._heartbeat_file.touch()
        except OSError as exc:
            log.warning("cannot touch heartbeat %s: %s", self._heartbeat_file, exc)

    def _read_stop_file(self) -> str | None:
        if self._stop_file is None:
            return None
        now = time.monotonic()
        self._beat(now)
        if now - self._last_stop_check < self._interval:
            return None
        self._last_stop_check = now
        try:
            content = self._stop_file.read_text().strip().lower()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read stop file %s: %s", self._stop_file, exc)
            return None
        return REASON_PAUSE if content == REASON_PAUSE else REASON_STOP

    def await_verdict(self, length: int) -> None:
        """A validation at the rung ``length`` was reported: the next check waits for the
        searcher's verdict on it (``TrainContext`` calls this; no-op without a marker)."""
        if self._searched_file is not None and self._verdict_wait > 0:
            self._awaiting = length

    def _wait_verdict(self, length: int) -> None:
        """Until the ``searched`` marker reaches ``length``, the stop file appears, or
        ``verdict_wait`` seconds pass. A signal does not cut it short: the trial checkpoints
        and leaves either way, and the verdict decides how it leaves -- stopped (decided)
        or preempted (requeued, to resume and be stopped there; issue 48's smokes: five
        trials a run re-ran for one step that way). The wait is bounded by
        ``verdict_wait`` (2 s), well within a preemption's grace time."""
        assert self._searched_file is not None
        deadline = time.monotonic() + self._verdict_wait
        while True:
            if read_searched(self._searched_file) >= length:
                return
            if self._stop_file is not None and self._stop_file.exists():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                log.info("no verdict on the validation at %d within %.1f s: training on",
                         length, self._verdict_wait)
                return
            time.sleep(min(VERDICT_POLL_S, left))

    def _local_reason(self) -> str | None:
        if self._reason is not None:
            return self._reason
        if self._awaiting is not None:
            length, self._awaiting = self._awaiting, None
            self._wait_verdict(length)
            self._last_stop_check = float("-inf")   # look at the stop file now
        if self._signalled is not None:
            # the searcher's stop already written wins over the signal: the trial is
            # decided, so it leaves stopped (81) and is not requeued to run again only to
            # be stopped; a pause leaves as preempted (it resumes either way)
            self._last_stop_check = float("-inf")
            return REASON_STOP if self._read_stop_file() == REASON_STOP else REASON_SIGNAL
        return self._read_stop_file()

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """True once the trial must checkpoint and exit; sticky once True.

        In ``WorkersAskChief`` mode this is a collective: every rank must call it
        at the same step. ``auto_ack=False`` (Determined's): the preemption counts
        (leaving ``init()`` exits 80/81) only after ``acknowledge_preemption_signal()``.
        """
        if self._mode is PreemptMode.ExplicitOnly:
            return False
        if self._mode is PreemptMode.ChiefOnly:
            reason = self._local_reason() if self._dist.rank == 0 else None
        elif self._mode is PreemptMode.WorkersAskMaster:
            reason = self._local_reason()
        else:
            local = self._local_reason() if self._dist.rank == 0 else None
            reason = self._dist.broadcast(local)
        if reason is not None:
            if self._reason is None:
                log.info("preemption requested (%s): checkpointing and exiting", reason)
            self._reason = reason
            if auto_ack:
                self._acknowledged = True
            return True
        return False

    def acknowledge_preemption_signal(self) -> None:
        """Accept the preemption seen by ``should_preempt(auto_ack=False)``."""
        if self._reason is not None:
            self._acknowledged = True

    @property
    def reason(self) -> str | None:
        """``"signal"``, ``"stop"``, ``"pause"`` or None, as last seen by should_preempt()."""
        return self._reason

    @property
    def signal_received(self) -> signal.Signals | None:
        """The signal this process got (local, not broadcast), if any."""
        return self._signalled

    def exit_code(self) -> int | None:
        """80 after a signal, 81 after a stop/pause file, None if never acknowledged."""
        if not self._acknowledged:
            return None
        return EXIT_PREEMPTED if self._reason == REASON_SIGNAL else EXIT_STOPPED


class DummyPreemptContext(PreemptContext):
    """Off-cluster twin: never preempts, installs no handler. Built as Determined's,
    ``DummyPreemptContext(dist, preempt_mode=PreemptMode.WorkersAskChief)``; the mode
    is checked and kept (``preempt_mode``), nothing depends on it here."""

    def __init__(self, dist: DistributedContext | None = None,
                 preempt_mode: PreemptMode = PreemptMode.WorkersAskChief) -> None:
        self.preempt_mode = PreemptMode(preempt_mode)
        super().__init__(dist or DistributedContext(), stop_file=None,
                         mode=PreemptMode.ExplicitOnly)
