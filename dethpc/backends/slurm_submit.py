"""Submitting to Slurm: the ``sbatch`` command line and what sbatch's refusals mean.

Owns: ``submit`` (one ``sbatch --parsable``, never retried: a retried sbatch may
submit twice) and ``judge`` (one ``sbatch --test-only``, asked again while nodes
register with a just restarted slurmctld: one ``sinfo`` per refusal, for at most
``REGISTER_WAIT_S``); the pure pieces they are built of, with table tests:
``sbatch_argv`` (refuses array indices at or above ``MaxArraySize``),
``export_arg`` (refuses a comma ``--export`` cannot carry), ``submit_error``
(sbatch's stderr -> ``SubmitLimitError`` / ``SubmitError``, getopt's complaint about an
option in sbatch's words / the command error)
and ``submitted_refs``.
Must not: parse Slurm's text itself (``slurm_parse`` does), run commands except
through the ``CommandRunner`` it is handed, or read site facts itself (the caller
hands ``MaxArraySize`` over, asked only for an array).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from dethpc.backends import slurm_parse as sp
from dethpc.backends.base import JobRequest
from dethpc.backends.limits import limit_refusal
from dethpc.common.errors import CommandError, SubmitError, SubmitLimitError
from dethpc.common.jobref import JobRef, format_array, task_refs
from dethpc.common.runner import CommandRunner
from dethpc.common.sbatch_options import getopt_complaint

#: how long ``judge`` asks again while nodes have not registered with slurmctld (a
#: loaded 2-core CI machine took more than 15 s)
REGISTER_WAIT_S = 30.0
#: after the last node registered, how long ``judge`` still asks again: the controller
#: may refuse for a moment more while it settles the nodes it just heard from
SETTLE_S = 5.0


# ------------------------------------------------------------------- pure pieces
def sbatch_argv(request: JobRequest, mode: str, max_array_size: Callable[[], int]) -> list[str]:
    """``sbatch <mode> ...`` for ``request`` (``--parsable`` or ``--test-only``).
    ``max_array_size`` (the site's ``MaxArraySize``) is asked only for an array."""
    argv = ["sbatch", mode, f"--chdir={Path(request.workdir)}",
            f"--job-name={request.name}", f"--comment={request.comment}"]
    indices = sorted(set(request.array_indices))
    if indices:
        limit = max_array_size()
        if indices[-1] >= limit:
            raise SubmitError(f"array index {indices[-1]} is above this cluster's "
                              f"MaxArraySize-1 ({limit - 1}); submit smaller batches")
        argv.append(f"--array={format_array(indices, request.throttle)}")
    if request.output is not None:
        argv.append(f"--output={request.output}")
    return [*argv, *export_arg(request), *request.extra_args, str(request.script)]


def export_arg(request: JobRequest) -> list[str]:
    """``--export=ALL,K=V,...`` for the request's environment ([] without one)."""
    if not request.env:
        return []
    for key, value in request.env.items():
        if "," in value or "," in key:
            raise SubmitError(f"environment variable {key} has a comma, which sbatch "
                              "--export cannot carry; set it in the job script instead")
    return ["--export=ALL," + ",".join(f"{k}={v}" for k, v in request.env.items())]


def submit_error(exc: CommandError) -> Exception:
    """What a failed ``sbatch`` means: a per-user limit (``SubmitLimitError``: wait),
    a pool that names what the site lacks or cannot fit (``SubmitError``), else the
    command error itself."""
    text = exc.stderr
    word = limit_refusal(text)
    if word is not None:
        return SubmitLimitError(word, text.strip())
    if "invalid partition" in text.lower() or "Invalid qos" in text or "Invalid account" in text:
        return SubmitError(f"sbatch refused the job: {text.strip()}")
    if "Requested node configuration is not available" in text:
        return SubmitError(f"sbatch refused the job: {text.strip()} (the allocation cannot fit "
                           "the partition's nodes)")
    if any(getopt_complaint(line) and line.startswith("sbatch: ")
           for line in text.splitlines()):
        return SubmitError(f"sbatch refused the job: {sp.sbatch_refusal(text)} (an option of "
                           "the pool's or the experiment's sbatch_args)")
    return exc


def submitted_refs(job: str, request: JobRequest) -> list[JobRef]:
    """One ref per array index, in index order (``<job>_<i>``); ``[job]`` otherwise."""
    return task_refs(job, sorted(set(request.array_indices)))


# ------------------------------------------------------------------------ commands
def submit(runner: CommandRunner, request: JobRequest,
           max_array_size: Callable[[], int]) -> list[JobRef]:
    """``Backend.submit``: one ``sbatch --parsable``, never retried."""
    argv = sbatch_argv(request, "--parsable", max_array_size)
    try:
        res = runner.run(argv, retry=False)  # a retried sbatch may submit twice
    except CommandError as exc:
        raise submit_error(exc) from exc
    return submitted_refs(sp.parse_sbatch_parsable(res.stdout), request)


def judge(runner: CommandRunner, request: JobRequest,
          max_array_size: Callable[[], int]) -> str | None:
    """Slurm's verdict on ``request`` without submitting it: one ``sbatch
    --test-only``. None when Slurm would take the job, else Slurm's own words.
    A refusal while some node's state is UNKNOWN (slurmctld just restarted, its
    slurmd not registered yet: for about 4 s here every job is refused with
    "Requested node configuration is not available") is asked again, for at most
    ``REGISTER_WAIT_S`` and until ``SETTLE_S`` after the last node registered, before it
    is believed (one sinfo per refusal); without a restart going on, at once."""
    deadline = time.monotonic() + REGISTER_WAIT_S
    seen_registering = False          # a restart was seen: keep asking a while
    settled_at: float | None = None   # when the nodes were first all registered again
    while True:
        res = runner.run(sbatch_argv(request, "--test-only", max_array_size), check=False,
                         retry=False)
        if res.returncode == 0:
            return None
        now = time.monotonic()
        if now >= deadline:
            return sp.sbatch_refusal(res.stderr)
        if _nodes_registering(runner):
            seen_registering, settled_at = True, None
        elif not seen_registering:
            return sp.sbatch_refusal(res.stderr)   # no restart going on: believed at once
        else:
            settled_at = now if settled_at is None else settled_at
            if now - settled_at >= SETTLE_S:
                return sp.sbatch_refusal(res.stderr)
        time.sleep(0.5)


def _nodes_registering(runner: CommandRunner) -> bool:
    res = runner.run(["sinfo", "-h", "-N", "-o", "%T"], check=False, retry=False)
    return res.returncode == 0 and sp.nodes_registering(res.stdout)
