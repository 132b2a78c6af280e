"""The ``dethpc`` console script: the job API without the CLI, everything else the CLI.

Owns: the dispatch on the first word: ``report``, ``should-stop``, ``hparams`` and
``latest-checkpoint`` run ``dethpc.launch.jobapi.main`` (a training loop calls them at every
step: no typer, rich or database imports, docs/shell-api.md); anything else runs
``dethpc.surfaces.cli.main.main``. ``python -m dethpc.surfaces.entry ...`` does the same.
``dethpc --version`` is answered here, and ``dethpc --help`` from the copy of its
output ``cli.helpcache`` saved, without the CLI's imports, and ``experiment list``,
``experiment describe`` and ``trial logs`` by ``cli.fastread`` on a SQLite store at head,
without typer or the ORM (issue 47: the commonest questions at the speed of Slurm's own
tools), and a plain ``dethpc sbatch`` there by ``cli.fastsbatch``; ``dethpc daemon stop``
by ``cli.fastdaemon``.
A ``submit`` (``experiment create``) that will start the user's daemon starts it here,
before the CLI's imports (``service.prestart``).
Must not: import ``dethpc.surfaces.cli`` for a job API verb.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence

#: the job API's verbs (``dethpc.launch.jobapi``)
JOB_VERBS = frozenset({"report", "should-stop", "hparams", "latest-checkpoint"})


#: ``submit``'s options with which it starts no daemon here
NO_DAEMON = frozenset({"--no-daemon", "--local", "--help", "-h"})


def prestart_wanted(args: list[str]) -> bool:
    """True for ``dethpc submit`` (``experiment create``) run here, not forwarded to a
    remote login node, without ``--no-daemon``/``--local``/``--help``: it starts the
    user's daemon at its end, so ``main`` starts it at its first line instead
    (``service.prestart``): the daemon's imports (about 2 s) then run beside the CLI's
    instead of after them (bench/peers: the command to the first sbatch). A submit that
    fails stops it again."""
    from dethpc.common.errors import DethpcError
    from dethpc.surfaces.remote.cli import split_remote, submit_positions
    from dethpc.surfaces.remote.target import load_file, resolve

    try:
        option, rest = split_remote(args)
        return not (submit_positions(rest) is None or NO_DAEMON & set(rest)
                    or resolve(option, load_file()) is not None)
    except DethpcError:        # the CLI says what is wrong with the remote setting
        return False


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in JOB_VERBS:
        from dethpc.launch.jobapi import main as job_main

        sys.exit(job_main(args))
    if args == ["--version"]:  # what the CLI prints, without its imports
        from dethpc.common.version import __version__

        sys.stdout.write(f"{__version__}\n")
        sys.exit(0)
    if not remote_file_present() and args[:1] in (["experiment"], ["e"], ["trial"], ["t"]):
        from dethpc.surfaces.cli.fastread import answer

        code = answer(args)  # list, describe, logs: sqlite3, no typer (None: not its own)
        if code is not None:
            sys.exit(code)
    if args == ["daemon", "stop"] and not remote_file_present():
        from dethpc.surfaces.cli.fastdaemon import answer as daemon_answer

        code = daemon_answer(args)  # the lock and pid files only: no typer, no config
        if code is not None:
            sys.exit(code)
    if args[:1] == ["sbatch"] and not remote_file_present():
        from dethpc.surfaces.cli.fastsbatch import answer as sbatch_answer

        code = sbatch_answer(args[1:])  # a plain job: sqlite3, no typer (None: not its own)
        if code is not None:
            sys.stdout.flush()
            sys.exit(code)
    from dethpc.surfaces.cli import helpcache

    if not remote_file_present():
        saved = helpcache.saved_help(args)
        if saved is not None:
            sys.stdout.flush()
            sys.stdout.buffer.write(saved)
            sys.exit(0)
    if prestart_wanted(args):
        from dethpc.control.service import prestart

        prestart()
    from dethpc.surfaces.cli.main import main as cli_main

    if argv is not None:
        sys.argv = [sys.argv[0], *args]
    with helpcache.recording(args if not remote_file_present() else []):
        cli_main()


def remote_file_present() -> bool:
    """Whether a remote target file exists (then the CLI may forward even ``--help``
    to the login node it names, docs/remote.md, so no saved help is used)."""
    import os

    from dethpc.surfaces.remote.location import remote_file

    return os.path.isfile(remote_file())


if __name__ == "__main__":
    main()
