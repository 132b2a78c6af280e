"""The job API's verbs in the typer app, so ``dethpc --help`` lists them.

Owns: thin pass-through commands (``report``, ``should-stop``, ``hparams``,
``latest-checkpoint``) that hand their raw words to ``dethpc.launch.jobapi.main``.
The console script (``dethpc.surfaces.entry``) normally runs these verbs without this app;
these commands serve ``python -m dethpc.surfaces.cli.main`` and the help text.
Must not: parse or check anything itself (``dethpc.launch.jobapi`` does).
"""

from __future__ import annotations

from collections.abc import Callable

import typer

_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True,
             "allow_interspersed_args": False}

#: verb -> one-line help, as ``dethpc --help`` shows it
VERBS = {
    "report": "Job API: report metrics --step N key=value... | report checkpoint PATH.",
    "should-stop": "Job API: exit 0 when the job must checkpoint and exit now.",
    "hparams": "Job API: print the trial's hyperparameters (--json, --env).",
    "latest-checkpoint": "Job API: print the checkpoint the next run resumes from.",
}


def _command(verb: str) -> Callable[[typer.Context], None]:
    def run(ctx: typer.Context) -> None:
        from dethpc.launch.jobapi import main

        raise typer.Exit(main([verb, *ctx.args]))

    run.__name__ = verb.replace("-", "_")
    return run


def register(app: typer.Typer) -> None:
    """Add the job API's verbs to ``app`` (each passes its words through)."""
    for verb, text in VERBS.items():
        app.command(verb, help=text, add_help_option=False,
                    context_settings=_SETTINGS)(_command(verb))
