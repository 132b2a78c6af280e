"""``dethpc daemon stop`` without typer, the ORM or the cluster config.

Owns: ``answer(args)``: ``dethpc daemon stop`` exactly (no other word or option), run by
the console entry (``dethpc.surfaces.entry``) before the CLI's imports: the daemon's
supervisor and the daemon stopped through ``dethpc.control.service.stop``, what the typer
command prints (``no daemon running`` / ``stopped daemon PID``, stdout) and its exit
code; a daemon that does not stop is the same error (``error: ...`` on stderr, the error's
exit code). Why: the command needs only ``$DETHPC_HOME``'s lock and pid files, and the
full CLI cost it ~0.6 s of CPU (typer, rich, the config model) every call, 83 calls a
suite run (bench/results/suite_cpu.json). None: not mine (``--help``, a root option, a
remote target: the full CLI runs it).
Must not: import typer, click, SQLAlchemy, sqlmodel, pydantic or the daemon loop
(tests/unit/surfaces/test_cli_fastdaemon.py checks, and that the bytes are the typer
command's).
"""

from __future__ import annotations

import sys


def answer(args: list[str]) -> int | None:
    """Run ``dethpc daemon stop`` when ``args`` spell exactly it; its exit code, or None
    (nothing done) for the full CLI."""
    if args != ["daemon", "stop"]:
        return None
    from dethpc.common.errors import DethpcError
    from dethpc.control import service
    from dethpc.surfaces.cli import output

    try:
        pid = service.stop()
    except DethpcError as exc:
        output.report_error(exc)
        return exc.exit_code
    text = "no daemon running" if pid is None else f"stopped daemon {pid}"
    if output.plain_console():          # what rich prints there: the same bytes
        sys.stdout.write(text + "\n")
    else:
        output.console.print(text)      # the typer command's own call
    return 0
