"""``dethpc sbatch --search search.yaml [sbatch options] script.sh [args...]``.

Owns: the typer command: hands the raw words to ``dethpc.sbatchwrap.search_cli`` and
prints one line (``Submitted experiment N``, or ``N`` under ``--parsable``).
Interim: registered only while no plain ``dethpc sbatch`` command exists; that
command takes ``--search`` over by calling ``run_search``.
Must not: hold logic the library lacks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import typer

from dethpc.cli.common import ENV


def run_search(argv: Sequence[str], environ: Mapping[str, str], cwd: Path) -> str:
    """Parse, record the search, return the line to print."""
    from dethpc.directives import canonical_option
    from dethpc.errors import DethpcError
    from dethpc.sbatchwrap.search import announce, refuse_options, submit_search
    from dethpc.sbatchwrap.search_cli import UsageError, parse_command, submission_options

    cmd = parse_command(argv)
    if cmd.search_file is None:
        raise UsageError("this build's `dethpc sbatch` runs searches only: give "
                         "--search search.yaml before the script")
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
    exp_id = submit_search(ENV.store, ENV.cluster, ENV.backend, search_file=cwd / cmd.search_file,
                           script=script, args=cmd.args, options=options, submit_dir=cwd,
                           environ=environ, overrides=cmd.overrides)
    return announce(exp_id, cmd.parsable)


USAGE = """Usage: dethpc sbatch --search SEARCH.yaml [--parsable] [--config KEY=VALUE]
                     [sbatch options] SCRIPT [ARGS...]

Run a searcher over an unchanged sbatch script: each trial runs SCRIPT with its
hyperparameters as $DETHPC_HP_<NAME> and in the JSON file $DETHPC_HPARAMS.
Prints 'Submitted experiment N' (N alone under --parsable). See
docs/existing-scripts.md, "Search over an unchanged script"."""


def sbatch(ctx: typer.Context) -> None:
    """Run a searcher over an unchanged sbatch script (docs/existing-scripts.md)."""
    args = list(ctx.args)
    head = args[:next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))]
    if not args or "--help" in head or "-h" in head:
        typer.echo(USAGE)
        return
    typer.echo(run_search(args, dict(os.environ), Path.cwd()))
