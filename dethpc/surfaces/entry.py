"""The ``dethpc`` console script: the job API without the CLI, everything else the CLI.

Owns: the dispatch on the first word: ``report``, ``should-stop``, ``hparams`` and
``latest-checkpoint`` run ``dethpc.launch.jobapi.main`` (a training loop calls them at every
step: no typer, rich or database imports, docs/shell-api.md); anything else runs
``dethpc.surfaces.cli.main.main``. ``python -m dethpc.surfaces.entry ...`` does the same.
Must not: import ``dethpc.surfaces.cli`` for a job API verb.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

#: the job API's verbs (``dethpc.launch.jobapi``)
JOB_VERBS = frozenset({"report", "should-stop", "hparams", "latest-checkpoint"})


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in JOB_VERBS:
        from dethpc.launch.jobapi import main as job_main

        sys.exit(job_main(args))
    from dethpc.surfaces.cli.main import main as cli_main

    if argv is not None:
        sys.argv = [sys.argv[0], *args]
    cli_main()


if __name__ == "__main__":
    main()
