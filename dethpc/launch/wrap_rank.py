"""``python -m dethpc.launch.wrap_rank [--no-redirect-stdio] RANK [--] COMMAND...``:
run COMMAND and prefix each line it prints with ``[rank=RANK] ``.

Owns: Determined 0.38.1's ``determined.launch.wrap_rank`` as dethpc serves it (inside a
trial's job ``python3 -m determined.launch.wrap_rank`` resolves here through the job-side
alias; an entrypoint naming it is rewritten to this module). What it does, as
Determined's: RANK is an integer, or a comma-separated list of environment variable names
tried in order (none set: a message on stderr and exit 1); the command's stdout and
stderr go to this process's stdout and stderr, each line prefixed; a line ends at ``\\n``
or at ``\\r`` (a progress bar's redraws become lines; ``\\r\\n`` is two line ends) and is
cut at 8,191 bytes; a last line without an end gets one; SIGINT, SIGTERM, SIGHUP, SIGUSR1,
SIGUSR2 and SIGWINCH are passed to the command; the exit status is the command's.
What differs: ``--no-redirect-stdio`` is accepted and changes nothing (Determined's
redirects to its container's log files, which a Slurm job does not have: the output goes
to the job's log either way); bytes are passed through, never decoded (Determined's ends
with a traceback on a line that is not UTF-8).
Must not: import any of dethpc's modules (it is a thin wrapper in every rank's process
chain, and ``import dethpc`` there would cost each rank), or hold a line past its end.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import BinaryIO

#: the longest line forwarded at once, its end included (Determined's: io's buffer less 1)
LINE_LIMIT = io.DEFAULT_BUFFER_SIZE - 1
_LINE_END = re.compile(rb"[\r\n]")
FORWARDED = tuple(getattr(signal, name) for name in
                  ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGWINCH")
                  if hasattr(signal, name))


class RankError(ValueError):
    """RANK names no variable that is set."""


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m dethpc.launch.wrap_rank",
        usage="%(prog)s [-h] [--no-redirect-stdio] RANK SCRIPT...",
        description="Run SCRIPT and prefix each line of its output with [rank=RANK].")
    parser.add_argument("--no-redirect-stdio", action="store_true",
                        help="accepted for Determined's command lines; changes nothing")
    parser.add_argument("rank", metavar="RANK",
                        help="an integer rank, or comma-separated names of environment "
                             "variables tried in order")
    parser.add_argument("script", nargs=argparse.REMAINDER, metavar="SCRIPT...",
                        help="the command to run")
    args = parser.parse_args(list(argv))
    if args.script[:1] == ["--"]:
        args.script = args.script[1:]
    if not args.script:
        parser.error("SCRIPT...: give the command to run after RANK")
    return args


def resolve_rank(spec: str, env: Mapping[str, str]) -> int:
    """RANK as given (digits), else the first of its variables that is set."""
    if spec.isdigit():
        return int(spec)
    for name in spec.split(","):
        if name in env:
            return int(env[name])
    raise RankError(f"rank environment variable is set to {spec}, but it is not in "
                    "os.environ")


def lines(read: BinaryIO) -> Iterator[bytes]:
    """The stream's lines, each ending in ``\\n`` (a ``\\r`` ends one too), none longer
    than ``LINE_LIMIT`` bytes."""
    pending = bytearray()
    while chunk := read.read(LINE_LIMIT - len(pending)):
        while chunk:
            end = _LINE_END.search(chunk)
            if end is None:
                pending += chunk
                break
            pending += chunk[:end.start()] + b"\n"
            yield bytes(pending)
            pending.clear()
            chunk = chunk[end.end():]
        if len(pending) >= LINE_LIMIT:
            yield bytes(pending) + b"\n"
            pending.clear()
    if pending:
        yield bytes(pending) + b"\n"


def forward(src: BinaryIO, dst_fd: int, rank: int) -> None:
    prefix = f"[rank={rank}] ".encode()
    for line in lines(src):
        os.write(dst_fd, prefix + line)


def run(rank: int, script: Sequence[str]) -> int:
    """Run ``script`` with its output prefixed; its exit status."""
    proc = subprocess.Popen(list(script), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            bufsize=0)

    def passthru(signum: int, _frame: object) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, passthru) for sig in FORWARDED}
    try:
        assert proc.stdout is not None and proc.stderr is not None
        threads = [threading.Thread(target=forward, args=(src, dst.fileno(), rank))
                   for src, dst in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        rank = resolve_rank(args.rank, os.environ)
    except (RankError, ValueError) as exc:
        print(exc if isinstance(exc, RankError) else
              f"RANK: {args.rank!r} is neither an integer nor names a variable holding one "
              f"({exc})", file=sys.stderr)
        return 1
    sys.stdout.flush()
    try:
        return run(rank, args.script)
    except FileNotFoundError as exc:
        print(f"SCRIPT: cannot run {args.script[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
