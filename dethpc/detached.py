"""Jobs dethpc did not submit that register themselves (Determined's detached mode).

Owns: the job side of registration: ``trial_dir(env)`` gives the trial directory of
the running job: ``$DETHPC_TRIAL_DIR`` when dethpc wrapped the job, else (inside a Slurm
job) ``<spool>/detached/<job ref>/`` after writing its ``register.json`` once.
Must not: touch the database (the daemon adopts the registration, see docs) or import
anything heavy: the shell API calls it on every ``dethpc report``.

STUB: filled in by the detached-mode work (issue 13 item 4).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def trial_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """The running job's trial directory, registering a detached job on first use;
    None outside any dethpc trial and any Slurm job."""
    env = os.environ if env is None else env
    raw = env.get("DETHPC_TRIAL_DIR")
    return Path(raw) if raw else None
