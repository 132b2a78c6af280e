"""Whether ``import determined`` in a trial's job means dethpc: the job-side alias.

Owns: the rule (docs/core-api.md, "import determined inside a trial"): a trial's job puts
``alias_path/`` (a package ``determined`` that is ``dethpc`` under Determined's names, its
sub-modules and ``python -m determined.launch.*`` included) on ``PYTHONPATH`` when, and
only when, no real ``determined`` is importable by the job's interpreter with the job's
``PYTHONPATH``. The job script evaluates ``python -m dethpc.launch.detenv``, which adds
``alias_env``'s lines; the worker pool adds them to each trial it runs. Nothing else
(dethpc's commands, the daemon, a plain ``python``) ever has the alias on its path.
Must not: import ``determined`` (a real one runs code at import), or touch a
``PYTHONPATH`` that already names the alias.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from dethpc.common.jobenv import ENV_DETERMINED_ALIAS

#: the directory that holds the alias package ``determined``
ALIAS_DIR = Path(__file__).resolve().parent / "alias_path"


def real_determined(env: Mapping[str, str], path: list[str] | None = None) -> str | None:
    """Where a real ``determined`` would be imported from by this interpreter under
    ``env``'s ``PYTHONPATH`` (``path``: this interpreter's ``sys.path`` minus the current
    directory, by default), else None. The alias's own directory is not looked in."""
    if path is None:
        path = [p for p in sys.path[1:] if p]
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    alias = str(ALIAS_DIR)
    search = [p for p in [*extra, *path] if os.path.abspath(p) != alias]
    spec = importlib.machinery.PathFinder.find_spec("determined", search)
    if spec is None:
        return None
    return spec.origin or ",".join(spec.submodule_search_locations or ())


def alias_env(env: Mapping[str, str], path: list[str] | None = None) -> dict[str, str]:
    """``PYTHONPATH`` with the alias first, and ``DETHPC_DETERMINED_ALIAS`` naming it, when
    no real Determined is importable; else nothing."""
    current = env.get("PYTHONPATH", "")
    alias = str(ALIAS_DIR)
    if alias in current.split(os.pathsep) or real_determined(env, path) is not None:
        return {}
    return {"PYTHONPATH": alias + (os.pathsep + current if current else ""),
            ENV_DETERMINED_ALIAS: alias}
