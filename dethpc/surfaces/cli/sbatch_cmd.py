"""``dethpc sbatch``: a drop-in for ``sbatch``, and ``dethpc sbatch --search``.

Owns: the typer command: hands the raw words to ``dethpc.surfaces.sbatchwrap`` (``plain`` for a
job, ``search`` for a search) and prints what it returns with sbatch's exit code. A plain
job on an SQLite store at head is answered before typer by ``fastsbatch`` (issue 47),
whose ``run_plain``, ``dethpc_head``, ``ensure_daemon`` and ``launch_daemon`` this
command shares; here it
runs for a search, the help, PostgreSQL, a store to create or upgrade, or
``DETHPC_FAST_SBATCH=0``.
Must not: hold logic the library lacks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import typer

from dethpc.common.jobenv import ENV_HP_PREFIX, ENV_HPARAMS
from dethpc.surfaces.cli import fastsbatch
from dethpc.surfaces.cli.common import ENV
from dethpc.surfaces.cli.fastsbatch import (  # noqa: F401 - re-exported
    dethpc_head,
    ensure_daemon,
    launch_daemon,
)


def run_search(argv: Sequence[str], environ: Mapping[str, str], cwd: Path) -> str:
    """Parse, record the search, return the line to print."""
    from dethpc.common.errors import DethpcError
    from dethpc.common.sbatch_options import canonical_option
    from dethpc.surfaces.sbatchwrap.search import announce, refuse_options, submit_search
    from dethpc.surfaces.sbatchwrap.search_cli import UsageError, parse_command, submission_options

    cmd = parse_command(argv)
    if cmd.forward_signal:
        raise UsageError("--forward-signal cannot be used with --search: a search's trials "
                         "learn of the signal through `dethpc should-stop`")
    if cmd.max_idle is not None:
        raise UsageError("--max-idle cannot be used with --search: set slurm.watchdog "
                         "(max_idle_s, output: true) in the search file")
    refuse_options([(canonical_option(o) or o, "command line") for o in cmd.options])
    if cmd.script is None:
        raise UsageError("no script given: dethpc sbatch --search search.yaml [sbatch "
                         "options] script.sh [args...]")
    script = cmd.script if cmd.script.is_absolute() else cwd / cmd.script
    try:
        text = script.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise DethpcError(f"cannot read the script {cmd.script}: {exc}") from None
    options = submission_options(cmd, text, environ)
    assert cmd.search_file is not None  # the caller saw --search
    exp_id = submit_search(ENV.store, ENV.cluster, ENV.backend, search_file=cwd / cmd.search_file,
                           script=script, args=cmd.args, options=options, submit_dir=cwd,
                           environ=environ, overrides=cmd.overrides)
    return announce(exp_id, cmd.parsable)


def run_plain(argv: Sequence[str], environ: Mapping[str, str], cwd: Path,
              stdin_text: str | None) -> tuple[str, str, int]:
    """Submit one job (or array) through the real sbatch: (stdout, stderr, exit code);
    the records through ``ENV.store`` (``fastsbatch.run_plain``, which the light path
    runs over an SQLite store at head)."""
    from dethpc.common.runner import CommandRunner
    from dethpc.surfaces.sbatchwrap import plain
    from dethpc.surfaces.sbatchwrap.site import SbatchSite

    if plain.wants_info(argv):
        out = plain.passthrough(argv, CommandRunner(env=dict(environ), cwd=str(cwd)))
        return out.stdout, out.stderr, out.code
    return fastsbatch.run_plain(argv, environ, cwd, stdin_text, site=SbatchSite.of(ENV.cluster),
                                store=lambda: ENV.store,
                                max_array_size=lambda: ENV.backend.max_array_size())


USAGE = f"""Usage: dethpc sbatch [--forward-signal] [--max-idle auto|SECONDS] [--no-daemon]
                     [sbatch options] SCRIPT [ARGS...]
       dethpc sbatch --search SEARCH.yaml [--parsable] [--config KEY=VALUE]
                     [sbatch options] SCRIPT [ARGS...]

The first form is sbatch itself: the same options and #SBATCH lines, the same output
('Submitted batch job N', N alone under --parsable), the same exit code. dethpc adds
--requeue and the pool's early --signal=B:SIG@GRACE unless set, records the job (one
trial per array task) and tracks it: `dethpc experiment list`, `dethpc trial logs`.
The early signal is recorded for `dethpc should-stop`, forwarded to the script only
with --forward-signal (or a '#DETHPC --forward-signal' line in its header). With
--max-idle (or '#DETHPC --max-idle SECONDS'), a run whose output files do not grow for
that long is hung: its job is requeued, a counted restart. The daemon that tracks the
job is started unless one runs (--no-daemon: do not).

The second runs a searcher over an unchanged script: each trial runs SCRIPT with its
hyperparameters as ${ENV_HP_PREFIX}<NAME> and in the JSON file ${ENV_HPARAMS}, and prints
'Submitted experiment N'. See docs/existing-scripts.md. `sbatch --help` lists sbatch's
options (also `dethpc sbatch --help-sbatch`)."""


def sbatch(ctx: typer.Context) -> None:
    """sbatch, tracked by dethpc; --search runs a searcher over the script
    (docs/existing-scripts.md)."""
    args = list(ctx.args)
    head = dethpc_head(args)
    # dethpc's own flag, before the script: do not start the daemon
    no_daemon = fastsbatch.NO_DAEMON in head
    if no_daemon:
        args.remove(fastsbatch.NO_DAEMON)
        head.remove(fastsbatch.NO_DAEMON)
    if "--help" in head or "-h" in head:
        typer.echo(USAGE)
        return
    if "--help-sbatch" in head:
        args = ["--help"]
    # the config's slurm_bin/slurm_conf into this process's environment first
    # (``clusterenv``), so that sbatch and the job see them, as on the light path
    ENV.cluster  # noqa: B018
    environ, cwd = dict(os.environ), Path.cwd()
    if any(a == "--search" or a.startswith("--search=") for a in head):
        typer.echo(run_search(args, environ, cwd))
        if not no_daemon:
            ensure_daemon()
        return
    _, stdin_text = fastsbatch.stdin_script(args)
    if stdin_text is None and not args:
        typer.echo(USAGE)
        return
    from dethpc.surfaces.sbatchwrap import plain

    out, err, code = run_plain(args, environ, cwd, stdin_text)
    sys.stdout.write(out)
    sys.stderr.write(err)
    if code:
        raise typer.Exit(code)
    if not no_daemon and not plain.wants_info(args):
        launch_daemon()         # the job is recorded: the daemon adopts it once up
