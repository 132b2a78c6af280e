"""The environment a search's trials get: the one ``dethpc sbatch --search`` ran in.

``sbatch`` hands a job the environment it was submitted from (``--export=ALL``, its
default). A search's trials are submitted later by the daemon, whose environment is
not the user's (no ``module load``, no activated conda or venv), so the submitting
environment is kept with the experiment (``save``: NUL-separated ``NAME=value``, as
``env -0`` writes it, exported functions included) and each array task starts its
trial through this file run as a script (``python -I -S submitenv.py FILE EXPORT --
argv...``), which merges it into the job's environment (``merge``) and execs argv.

Owns: which variables are kept (``merge``: the user's ``--export`` decides, as sbatch;
Slurm's per-job variables always win) and the file format.
Must not: import anything outside the standard library (it runs before every trial,
with ``-I -S``), or decide anything else about the job.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

#: set by Slurm (slurmd, gres plugins) for this job: never taken from the submitter
JOB_OWNED_PREFIXES = ("SLURM_", "SLURMD_", "SBATCH_", "DETHPC_")
JOB_OWNED = frozenset({
    "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
    "ZE_AFFINITY_MASK", "ENVIRONMENT", "HOSTNAME", "TMPDIR", "PWD", "OLDPWD",
    "SHLVL", "_"})


def job_owned(name: str) -> bool:
    return name in JOB_OWNED or name.startswith(JOB_OWNED_PREFIXES)


def exported_names(export: str | None, submitted: Mapping[str, str]) -> set[str]:
    """The names of ``submitted`` that sbatch's ``--export`` value would pass on:
    ``None``/``ALL``/``ALL,...``: all; ``NONE``/``NIL``: none; ``A,B=1``: ``A`` (an
    assignment such as ``B=1`` is Slurm's own doing, already in the job)."""
    if export is None:
        return set(submitted)
    items = [i for i in export.split(",") if i]
    head = items[0].upper() if items else "ALL"
    if head == "ALL":
        return set(submitted)
    if head in ("NONE", "NIL"):
        return set()
    return {i for i in items if "=" not in i and i in submitted}


def merge(job: Mapping[str, str], submitted: Mapping[str, str],
          export: str | None) -> dict[str, str]:
    """The trial's environment: the job's, with the submitter's variables that
    ``export`` passes on laid over it, except those Slurm sets for each job."""
    out = dict(job)
    for name in exported_names(export, submitted):
        if not job_owned(name):
            out[name] = submitted[name]
    return out


def dump(env: Mapping[str, str]) -> bytes:
    return b"".join(f"{k}={v}".encode("utf-8", "surrogateescape") + b"\0"
                    for k, v in env.items())


def load(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        if b"=" in item:
            key, _, value = item.decode("utf-8", "surrogateescape").partition("=")
            out[key] = value
    return out


def save(path: Path, env: Mapping[str, str]) -> None:
    """Keep the submitting environment (readable by the user only: it may hold secrets)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(dump(env))


def main(argv: list[str]) -> int:
    """``submitenv.py FILE EXPORT -- COMMAND...``: exec COMMAND in the merged env
    (``EXPORT`` is sbatch's ``--export`` value, ``-`` when none was given)."""
    if len(argv) < 4 or argv[2] != "--":
        print("usage: submitenv.py FILE EXPORT -- COMMAND...", file=sys.stderr)
        return 2
    path, export, command = Path(argv[0]), argv[1], argv[3:]
    try:
        submitted = load(path.read_bytes())
    except OSError as exc:
        print(f"dethpc: cannot read the submitting environment {path}: {exc}; "
              "the trial runs in the daemon's environment", file=sys.stderr)
        submitted = {}
    env = merge(os.environ, submitted, None if export == "-" else export)
    os.execvpe(command[0], command, env)  # noqa: S606 - argv list, the job's own command
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
