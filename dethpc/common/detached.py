"""Jobs dethpc did not submit that register themselves (Determined's detached mode).

Owns: the job side of registration: ``trial_dir(env)`` gives the trial directory of
the running job: ``$DETHPC_TRIAL_DIR`` when dethpc wrapped the job, else (inside a Slurm
job, unless ``DETHPC_DETACHED=0``) ``<spool>/detached/<job ref>/`` after writing its
``register.json`` once (and an empty ``hparams.json``, and ``outputs.txt``: the job's
own output files as Slurm resolved them, for ``dethpc trial logs``). A registration
that cannot be made (spool not writable, an entry another user owns) is one line on
stderr and no tracking: the job itself runs on, with the Dummy contexts. The job ref is
``<array job id>_<task id>`` for an array task, else the job id, so a requeued job
(same id) finds its own directory, metrics and checkpoints again. The daemon adopts the
registration (``dethpc.control.adoption``, docs/detached.md).
Must not: touch the database or import anything beyond the standard library,
``dethpc.common.paths`` and ``dethpc.common.errors``: the shell API calls it on every
``dethpc report``.
A spool entry another user owns is refused, never written into.

Several ranks of one job may call it at once: the directory is created with
``exist_ok`` and each file is written to a private temporary name and linked into
place, so the first writer wins and nobody sees a half-written file. Files and
directories get the job owner's umask; the spool's ``detached/`` directory is the
only shared one (a site spool should make it ``1777``, see docs/detached.md).
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dethpc.common.errors import DethpcError
from dethpc.common.jobenv import ENV_DETACHED, ENV_METRIC, ENV_SPOOL, ENV_TRIAL_DIR
from dethpc.common.jobref import ref_from_env
from dethpc.common.paths import TrialPaths, detached_dir

# ``DETHPC_DETACHED=0`` turns self-registration off (plain Slurm jobs stay untracked);
# ``DETHPC_METRIC`` is the searcher metric the adopted experiment reports as its best
# (``register.json``): both rows of dethpc.common.jobenv's table

def job_ref(env: Mapping[str, str]) -> str | None:
    """The job's own ref (``dethpc.common.jobref.ref_from_env``) in a Slurm job, None
    outside one."""
    return ref_from_env(env) if env.get("SLURM_JOB_ID", "").strip() else None


def registration(env: Mapping[str, str], ref: str) -> dict[str, Any]:
    """What ``register.json`` says of the job: who, which job, where, when."""
    def get(name: str) -> str:
        return env.get(name, "").strip()

    record: dict[str, Any] = {
        "user": get("SLURM_JOB_USER") or getpass.getuser(),
        "uid": os.getuid(),
        "job_id": get("SLURM_JOB_ID"),
        "job_ref": ref,
        "array_job_id": get("SLURM_ARRAY_JOB_ID") or None,
        "array_task_id": int(get("SLURM_ARRAY_TASK_ID")) if get("SLURM_ARRAY_TASK_ID")
        .isdigit() else None,
        "job_name": get("SLURM_JOB_NAME"),
        "submit_dir": get("SLURM_SUBMIT_DIR"),
        "cluster": get("SLURM_CLUSTER_NAME"),
        "partition": get("SLURM_JOB_PARTITION"),
        "nodes": get("SLURM_JOB_NODELIST") or get("SLURM_NODELIST"),
        "host": os.uname().nodename,
        "restart_count": int(get("SLURM_RESTART_COUNT") or 0)
        if get("SLURM_RESTART_COUNT").isdigit() else 0,
        "time": time.time(),
    }
    if get(ENV_METRIC):
        record["metric"] = get(ENV_METRIC)
    return record


def write_once(path: Path, text: str) -> bool:
    """Write ``path`` unless it exists, atomically (a private temporary file linked into
    place: the first of several racing writers wins). True when this call wrote it."""
    if path.exists():
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    tmp.write_text(text)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:   # a filesystem without hard links: rename (last writer wins, same text)
        os.replace(tmp, path)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def register(env: Mapping[str, str], ref: str) -> Path:
    """The detached trial directory of job ``ref``, registered (idempotent)."""
    tp = TrialPaths(detached_dir(ref))
    try:
        owner = tp.root.stat().st_uid
    except FileNotFoundError:
        owner = os.getuid()
    if owner != os.getuid():
        raise DethpcError(f"spool entry {tp.root} belongs to uid {owner}, not to this job's "
                          f"user (uid {os.getuid()}): a stale or foreign registration of "
                          f"job {ref}; remove it, or set {ENV_SPOOL} (or {ENV_DETACHED}=0)")
    if tp.registration.exists():
        return tp.root
    tp.checkpoints.mkdir(parents=True, exist_ok=True)
    write_once(tp.hparams, "{}\n")
    outputs = [] if tp.outputs.exists() else job_outputs(env.get("SLURM_JOB_ID", "").strip())
    if outputs:
        write_once(tp.outputs, "".join(f"{path}\n" for path in outputs))
    # register.json last: the daemon adopts only complete directories
    write_once(tp.registration, json.dumps(registration(env, ref), indent=2) + "\n")
    return tp.root


def job_outputs(job_id: str) -> list[str]:
    """The job's own output and error files, resolved by Slurm (``scontrol show job``:
    one RPC, once per job at registration), so ``dethpc trial logs`` can show them;
    [] when Slurm does not answer."""
    import subprocess

    if not job_id:
        return []
    try:
        out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                             text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
    found = [fields.get("StdOut", ""), fields.get("StdErr", "")]
    return list(dict.fromkeys(f for f in found if f.startswith("/")))


def trial_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """The running job's trial directory, registering a detached job on first use;
    None outside any dethpc trial and any Slurm job (and with ``DETHPC_DETACHED=0``)."""
    env = os.environ if env is None else env
    raw = env.get(ENV_TRIAL_DIR)
    if raw:
        return Path(raw)
    if env.get(ENV_DETACHED, "").strip() == "0":
        return None
    ref = job_ref(env)
    if ref is None:
        return None
    try:
        return register(env, ref)
    except (OSError, DethpcError) as exc:
        # tracking is a bonus for a job dethpc did not submit: never the reason it fails
        print(f"dethpc: this Slurm job is not tracked (detached registration failed: {exc})",
              file=sys.stderr, flush=True)
        return None
