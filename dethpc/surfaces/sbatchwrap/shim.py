"""The ``dethpc`` shim of a ``dethpc sbatch`` run directory.

Owns: ``write_shim``: ``<run dir>/bin/dethpc``, first on the PATH of a plain job's script
and of a search's trials, which runs the job API with the Python that runs dethpc.
Its own module (the standard library only: ``shlex.quote`` is
the templates' ``shquote``, without Jinja2): both the plain path, which
must stay light (issue 47 item 1), and the search write it.
Must not: write anything else.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from dethpc.common.paths import ExperimentPaths


def write_shim(paths: ExperimentPaths, python: str) -> Path:
    """``<run dir>/bin/dethpc``, first on a trial's PATH: the job API of the Python that
    runs dethpc (its light entry point ``dethpc.surfaces.entry`` when installed, else the CLI),
    whatever ``python`` the user's environment has."""
    import importlib.util

    module = ("dethpc.surfaces.entry" if importlib.util.find_spec("dethpc.surfaces.entry")
              else "dethpc.surfaces.cli.main")
    paths.bin.mkdir(parents=True, exist_ok=True)
    shim = paths.bin / "dethpc"
    shim.write_text(f"#!/bin/sh\nexec {shlex.quote(python)} -m {module} \"$@\"\n")
    shim.chmod(0o755)
    return shim
