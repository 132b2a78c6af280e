"""The subprocess seam: every external command dethpc runs goes through here.

Owns: ``CommandRunner`` (argv lists only, never a shell string; timeout;
retries with backoff on transient errors; an optional pacer asked before each
attempt; ``CommandError`` carrying argv, exit code, stdout and stderr) and
``RecordingRunner`` (counts calls, used by tests and benchmarks to prove that a tick
runs O(1) commands).
Must not: know about Slurm semantics beyond the list of transient messages.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from dethpc.common.errors import CommandError

if TYPE_CHECKING:
    import logging


def _log() -> logging.Logger:
    """This module's logger, ``logging`` imported when something is said (it is not on
    ``dethpc sbatch``'s light path otherwise, issue 47)."""
    import logging

    return logging.getLogger(__name__)

#: stderr fragments that mean "try again", as slurmctld reports load or restarts.
TRANSIENT_MARKERS: tuple[str, ...] = (
    "Socket timed out",
    "Resource temporarily unavailable",
    "Unable to contact slurm controller",
    "slurm_receive_msg",
    "Zero Bytes were transmitted",
    "Connection refused",
    "Transaction timed out",
    "Munge encode failed",  # munged restarting
)


@dataclass(frozen=True)
class CommandResult:
    """One command's argv, exit code and output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


#: what ``scontrol show config``/``scontrol ping`` print on stdout (exit 1) when the
#: controller they ping is down: the rest of their output is the local slurm.conf
#: (seen on the dev cluster during a slurmctld restart). The banner is printed for root
#: only (scontrol.c ``_print_ping``); every user gets the ``... is DOWN`` line, also
#: when slurmctld only refused the ping under its per-user RPC rate limit (measured on
#: 25.11: the ping is not retried after "back off")
CONTROLLER_DOWN = "RESTORE SLURMCTLD DAEMON TO SERVICE"
_PING_DOWN = re.compile(r"^Slurmctld\((?:primary|backup\d*)\) at \S+ is DOWN$", re.MULTILINE)


def is_transient(stderr: str, stdout: str = "") -> bool:
    """The command failed because the controller did not answer: ask again later."""
    return (any(m in stderr for m in TRANSIENT_MARKERS) or CONTROLLER_DOWN in stdout
            or _PING_DOWN.search(stdout) is not None)


class Pacer(Protocol):
    """Something that may wait before each command runs (a site's RPC rate limit:
    ``backends.slurm_ratelimit.RpcPacer``)."""

    def before(self, argv: Sequence[str]) -> None: ...

    def after(self, argv: Sequence[str], seconds: float) -> None: ...


@dataclass
class CommandRunner:
    """Runs argv lists with a timeout, retrying transient failures with backoff."""

    timeout: float = 60.0
    retries: int = 3
    backoff: float = 0.5
    env: Mapping[str, str] | None = None
    #: the directory commands run in (None: this process's)
    cwd: str | None = None
    #: asked before every attempt of every command (None: run at once)
    pacer: Pacer | None = None

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = None,
        input: str | None = None,
        retry: bool = True,
    ) -> CommandResult:
        """Run ``argv``; raise ``CommandError`` on failure when ``check``."""
        if isinstance(argv, str):  # defensive: a shell string must never get here
            raise TypeError("CommandRunner.run takes an argv list, not a string")
        args = tuple(str(a) for a in argv)
        attempts = 1 + (self.retries if retry else 0)
        delay = self.backoff
        last: CommandResult | None = None
        for attempt in range(attempts):
            if self.pacer is not None:
                self.pacer.before(args)
            started = time.monotonic()
            try:
                proc = subprocess.run(  # noqa: S603 - argv list, no shell
                    args,
                    capture_output=True,
                    text=True,
                    timeout=timeout or self.timeout,
                    input=input,
                    env=dict(self.env) if self.env is not None else None,
                    cwd=self.cwd,
                    check=False,
                )
            except FileNotFoundError as exc:
                raise CommandError(args, None, reason=f"could not be started ({exc})") from exc
            except subprocess.TimeoutExpired as exc:
                if attempt + 1 < attempts:
                    _log().warning("`%s` timed out, retrying in %.1fs", " ".join(args),
                                   delay)
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise CommandError(
                    args, None, _text(exc.stdout), _text(exc.stderr),
                    reason=f"timed out after {timeout or self.timeout:.0f}s",
                ) from exc
            if self.pacer is not None:
                self.pacer.after(args, time.monotonic() - started)
            last = CommandResult(args, proc.returncode, proc.stdout, proc.stderr)
            self._record(last)
            if proc.returncode == 0 or not check:
                return last
            if is_transient(proc.stderr, proc.stdout) and attempt + 1 < attempts:
                _log().warning("`%s` failed transiently (%s), retrying in %.1fs",
                            " ".join(args), (proc.stderr.strip() or proc.stdout.strip())[-200:],
                            delay)
                time.sleep(delay)
                delay *= 2
                continue
            break
        assert last is not None
        raise CommandError(args, last.returncode, last.stdout, last.stderr)

    def _record(self, result: CommandResult) -> None:
        """Hook for subclasses that count or log calls."""


@dataclass
class RecordingRunner(CommandRunner):
    """A real runner that also remembers every command it ran (argv tuples)."""

    calls: list[tuple[str, ...]] = field(default_factory=list)

    def _record(self, result: CommandResult) -> None:
        self.calls.append(result.argv)

    def count(self, program: str | None = None) -> int:
        if program is None:
            return len(self.calls)
        return sum(1 for c in self.calls if c and c[0].endswith(program))


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
