"""The shell-level job API: ``dethpc report|should-stop|hparams|latest-checkpoint``.

Owns: what a bash training loop gets of ``dethpc.core`` (issue 13 item 3,
docs/shell-api.md): each verb is one file operation in the trial directory (no
network, no database). ``hparam_env`` is the one rule that names ``DETHPC_HP_*``
variables (the search wrapper exports the same names).
Must not: import typer, rich, sqlmodel, sqlalchemy, jinja2 or yaml (each call pays
its imports; ``dethpc.surfaces.entry`` runs it without the CLI), or touch the store.
"""

from __future__ import annotations

from dethpc.launch.jobapi._cli import main
from dethpc.launch.jobapi._values import hparam_env

__all__ = ["hparam_env", "main"]
