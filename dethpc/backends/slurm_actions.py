"""Actions on jobs already in Slurm: cancel (or signal), requeue or release, change an
array's throttle.

Owns: the argv of each action (``cancel_argv``: one ``scancel`` for all refs, with
``--signal`` and the site's signal flags; ``steps_argv`` and ``launched_steps``: the
jobs' launched steps, whose ``scancel --signal=KILL`` ends each step and spares its
job; ``action_argv``: one ``scontrol requeue`` or ``scontrol release``;
``throttle_argv``: ``scontrol update ... ArrayTaskThrottle``), which stderr lines mean
the job is finished, finishing or unknown (``GONE``, ``HARMLESS``,
``harmless_errors``), all pure with table tests, and ``run_tolerant``, which runs one
action and lets those harmless errors pass (logged at info).
Must not: run commands except through the ``CommandRunner`` it is handed, or loop
per job.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from dethpc.backends.base import JobAction
from dethpc.common.errors import CommandError
from dethpc.common.runner import CommandRunner

log = logging.getLogger(__name__)

#: stderr of a query or action on a job slurmctld no longer knows
GONE = ("Invalid job id specified",)
#: stderr of scancel/scontrol on jobs that are finishing, finished or not started
HARMLESS = (*GONE, "already completing or completed", "Job is pending execution",
            "Job has already finished", "Requested operation is presently disabled")


def cancel_argv(refs: Sequence[str], signal: str | None,
                signal_flags: Sequence[str]) -> list[str]:
    """``scancel [--signal=SIG <signal_flags>] ref ...``."""
    argv = ["scancel"]
    if signal is not None:
        argv += [f"--signal={signal}", *signal_flags]
    return argv + list(refs)


def steps_argv(refs: Sequence[str]) -> list[str]:
    """``squeue --steps`` of the refs: one step id (``123_4.0``) per line."""
    return ["squeue", "--steps", "--noheader", "--format=%i", "--jobs", ",".join(refs)]


#: the steps of a job that are not a launched step (the shell, the container, salloc's)
_NOT_LAUNCHED = (".batch", ".extern", ".interactive")


def launched_steps(text: str) -> list[str]:
    """The launched steps (``srun``'s: ``123_4.0``, ``123.1``, ``123+1.0``) in
    ``squeue --steps`` output; the batch shell and the other pseudo-steps left out."""
    return [w for w in (ln.strip() for ln in text.splitlines())
            if "." in w and not w.endswith(_NOT_LAUNCHED)]


#: each action's command (spelled out: the golden test finds Slurm commands in the source)
_ACTION_WORDS = {JobAction.REQUEUE: ["scontrol", "requeue"],
                 JobAction.RELEASE: ["scontrol", "release"]}


def action_argv(refs: Sequence[str], action: JobAction) -> list[str]:
    """``scontrol requeue|release ref,ref``."""
    return [*_ACTION_WORDS[action], ",".join(refs)]


def throttle_argv(array_job_id: str, limit: int) -> list[str]:
    """A negative limit is 0 (no limit)."""
    return ["scontrol", "update", f"JobId={array_job_id}",
            f"ArrayTaskThrottle={max(0, limit)}"]


def harmless_errors(stderr: str) -> list[str] | None:
    """The error lines of a failed action when every one of them is harmless (the job
    is finished, finishing, pending or unknown), else None: a real failure."""
    errors = [ln for ln in stderr.splitlines() if ln.strip()]
    if errors and all(any(m in ln for m in HARMLESS) for ln in errors):
        return errors
    return None


def run_tolerant(runner: CommandRunner, argv: list[str]) -> None:
    """Run an action; errors about finished or unknown jobs are not failures."""
    res = runner.run(argv, check=False)
    if res.returncode == 0:
        return
    errors = harmless_errors(res.stderr)
    if errors is not None:
        log.info("`%s`: %s", " ".join(argv[:2]), "; ".join(errors)[:300])
        return
    raise CommandError(res.argv, res.returncode, res.stdout, res.stderr)
