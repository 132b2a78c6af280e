"""A tiny process supervisor (``python -m dethpc.common.supervisor``): the daemon's keeper.

Owns: running one command as its child and starting it again when it dies by a signal
or exits non-zero, what systemd's ``Restart=on-failure`` does, for login nodes without a
user systemd: ``dethpc daemon start`` (and ``submit``) starts the daemon under it
(``dethpc.control.service``). The rules (``decide``, a pure table):

* exit 0 (the daemon's clean stop) ends the supervisor too;
* the *first* run dying before it is ready (``--ready-pidfile`` never held its pid: the
  daemon did not take its lock) is not retried: whoever started it is waiting and
  reports the failure (``the daemon exited at once``), as before the supervisor;
* any other death is restarted after a back-off (``backoff_s``, doubled after each
  quick failure up to ``max_backoff_s``); a run that lived ``quick_s`` or longer resets
  it; after ``max_quick_failures`` quick failures in a row it gives up and logs why.

It sleeps in ``sigwaitinfo`` (every signal it cares for is blocked and taken
synchronously: no handler races), so it costs no CPU while the daemon runs.
SIGTERM/SIGINT: forward SIGTERM to the child, wait for it, exit 0 (``dethpc daemon
stop`` signals the supervisor first, so nothing comes back). SIGUSR1: restart now, when
it waits out a back-off (a ``dethpc`` command that wants the daemon). One supervisor per
``--lock`` file, held for its whole life; its pid is written to ``--pidfile``.
Must not: import anything beyond the standard library (no store, no ORM, no config: it
lives as long as the daemon, beside it), or decide anything about experiments.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import IO

#: the supervisor's exit code when another supervisor holds the lock
EXIT_BUSY = 75
#: how often the ready file is read while a fresh child starts (only until it is ready)
READY_POLL_S = 0.1
#: the signals taken synchronously
SIGNALS = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGUSR1}


@dataclass(frozen=True)
class Policy:
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    quick_s: float = 30.0
    max_quick_failures: int = 5


class Action(Enum):
    EXIT = "exit"          # clean exit, or a first start that failed: the starter reports it
    RESTART = "restart"
    GIVE_UP = "give up"


@dataclass(frozen=True)
class Decision:
    action: Action
    delay_s: float = 0.0
    quick_failures: int = 0


def decide(returncode: int, lived_s: float, *, ready: bool, first: bool,
           quick_failures: int, policy: Policy) -> Decision:
    """What to do when the child ended (``returncode`` as ``subprocess``: ``-N`` for
    signal N) after ``lived_s`` seconds, ``quick_failures`` quick failures before it."""
    if returncode == 0:
        return Decision(Action.EXIT)
    if first and not ready:
        return Decision(Action.EXIT)
    quick = not ready or lived_s < policy.quick_s
    failures = quick_failures + 1 if quick else 0
    if failures >= policy.max_quick_failures:
        return Decision(Action.GIVE_UP, quick_failures=failures)
    delay = min(policy.max_backoff_s, policy.backoff_s * 2 ** max(0, failures - 1))
    return Decision(Action.RESTART, delay, failures)


def _log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} INFO dethpc supervisor {os.getpid()}: {message}", file=sys.stderr,
          flush=True)


def _how(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class Supervisor:
    def __init__(self, command: Sequence[str], policy: Policy,
                 ready_pidfile: Path | None = None) -> None:
        self.command, self.policy, self.ready_pidfile = list(command), policy, ready_pidfile
        self.stopping = False
        self.child: int | None = None

    def _spawn(self) -> int:
        # the child gets an empty signal mask and default handlers back
        return os.posix_spawnp(self.command[0], self.command, dict(os.environ),
                               setsigmask=(), setsigdef=SIGNALS)

    def _ready(self, pid: int) -> bool:
        if self.ready_pidfile is None:
            return True
        try:
            return self.ready_pidfile.read_text().strip() == str(pid)
        except (OSError, ValueError):
            return False

    def _reap(self, pid: int) -> int | None:
        done, status = os.waitpid(pid, os.WNOHANG)
        return os.waitstatus_to_exitcode(status) if done == pid else None

    def _signal(self, timeout: float | None) -> int | None:
        """The next signal taken (None on timeout); SIGTERM/SIGINT mark the stop and are
        forwarded to the child."""
        info = (signal.sigwaitinfo(SIGNALS) if timeout is None
                else signal.sigtimedwait(SIGNALS, max(0.0, timeout)))
        if info is None:
            return None
        if info.si_signo in (signal.SIGTERM, signal.SIGINT):
            if not self.stopping:
                _log(f"stop asked ({signal.Signals(info.si_signo).name})")
            self.stopping = True
            if self.child is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.child, signal.SIGTERM)
        return info.si_signo

    def _run_once(self) -> tuple[int, float, bool]:
        """Start the child, wait for its end: (returncode, seconds lived, was it ready)."""
        started = time.monotonic()
        pid = self.child = self._spawn()
        _log(f"started pid {pid}: {' '.join(self.command)}")
        ready = False
        while True:
            code = self._reap(pid)
            if code is not None:
                self.child = None
                return code, time.monotonic() - started, ready
            if self.stopping:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            ready = ready or self._ready(pid)
            self._signal(None if ready else READY_POLL_S)

    def _back_off(self, delay_s: float) -> None:
        """Wait ``delay_s`` unless told to stop or to restart now (SIGUSR1)."""
        deadline = time.monotonic() + delay_s
        while not self.stopping:
            left = deadline - time.monotonic()
            if left <= 0 or self._signal(left) == signal.SIGUSR1:
                return

    def run(self) -> int:
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        quick, first = 0, True
        while True:
            code, lived, ready = self._run_once()
            if self.stopping:
                _log(f"pid ended ({_how(code)}) after the stop; exiting")
                return 0
            d = decide(code, lived, ready=ready, first=first, quick_failures=quick,
                       policy=self.policy)
            first, quick = False, d.quick_failures
            if d.action is Action.EXIT:
                _log(f"the child ended ({_how(code)}, after {lived:.1f} s"
                     f"{'' if ready or code == 0 else ', before it was ready'}); exiting")
                return code if code >= 0 else 128 - code
            if d.action is Action.GIVE_UP:
                _log(f"gave up: the child failed {quick} times in a row within "
                     f"{self.policy.quick_s:g} s of its start (last: {_how(code)}); see the "
                     "lines above for why, fix it, then start it again")
                return 1
            _log(f"the child died ({_how(code)}, after {lived:.1f} s; quick failures in a "
                 f"row: {quick}); restarting it in {d.delay_s:g} s")
            self._back_off(d.delay_s)
            if self.stopping:
                _log("stop asked during the back-off; exiting")
                return 0


@contextlib.contextmanager
def _locked(lock: Path, pidfile: Path) -> Iterator[bool]:
    """Hold ``lock`` (a few tries: a prober's ``LOCK_NB`` holds it for microseconds);
    yields False when another supervisor holds it."""
    f: IO[str] = open(lock, "a+")  # noqa: SIM115 - held for the context
    try:
        for attempt in range(5):
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 4:
                    yield False
                    return
                time.sleep(0.05)
        pidfile.write_text(str(os.getpid()))
        try:
            yield True
        finally:
            with contextlib.suppress(FileNotFoundError):
                if pidfile.read_text().strip() == str(os.getpid()):
                    pidfile.unlink()
    finally:
        f.close()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dethpc.common.supervisor",
                                description="restart a command that died (see the module)")
    p.add_argument("--command", required=True, help="the child's argv, a JSON list")
    p.add_argument("--lock", type=Path, required=True)
    p.add_argument("--pidfile", type=Path, required=True)
    p.add_argument("--ready-pidfile", type=Path)
    p.add_argument("--backoff-s", type=float, default=Policy.backoff_s)
    p.add_argument("--max-backoff-s", type=float, default=Policy.max_backoff_s)
    p.add_argument("--quick-s", type=float, default=Policy.quick_s)
    p.add_argument("--max-quick-failures", type=int, default=Policy.max_quick_failures)
    a = p.parse_args(argv)
    command = json.loads(a.command)
    policy = Policy(a.backoff_s, a.max_backoff_s, a.quick_s, a.max_quick_failures)
    # blocked before the pidfile names this process: a SIGUSR1 or SIGTERM sent as soon as
    # it is named must be taken by ``Supervisor.run``, not kill it by the default action
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    with _locked(a.lock, a.pidfile) as held:
        if not held:
            _log(f"another supervisor holds {a.lock}; exiting")
            return EXIT_BUSY
        return Supervisor(command, policy, a.ready_pidfile).run()


if __name__ == "__main__":
    sys.exit(main())
