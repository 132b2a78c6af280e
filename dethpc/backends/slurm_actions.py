"""Actions on jobs already in Slurm: cancel (or signal), requeue or release, change an
array's throttle.

Owns: the argv of each action (``cancel_argv``: one ``scancel`` for all refs, with
``--signal`` and the site's signal flags, an array's tasks named in one bracket form
(``grouped``: ``123_[4-9,12]`` is one KILL_JOB RPC where ``123_4 ... 123_12`` are one
each, measured with sdiag on 22.05); ``steps_argv`` and ``launched_steps``: the
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
from dethpc.common.jobref import canonical_ref, format_array
from dethpc.common.runner import CommandRunner

log = logging.getLogger(__name__)

#: stderr of a query or action on a job slurmctld no longer knows
GONE = ("Invalid job id specified",)
#: stderr of scancel/scontrol on jobs that are finishing, finished or not started
HARMLESS = (*GONE, "already completing or completed", "Job is pending execution",
            "Job has already finished", "Requested operation is presently disabled")


def cancel_argv(refs: Sequence[str], signal: str | None,
                signal_flags: Sequence[str]) -> list[str]:
    """``scancel [--signal=SIG <signal_flags>] ref ...``, each array's tasks in one
    bracket form (``grouped``)."""
    argv = ["scancel"]
    if signal is not None:
        argv += [f"--signal={signal}", *signal_flags]
    return argv + grouped(refs)


def grouped(refs: Sequence[str]) -> list[str]:
    """``refs`` with the tasks of one array (``123_4``, ``123_5``, ``123_9``) as one
    bracket form (``123_[4-5,9]``) where there are two or more, in the place of the
    first; every other ref (a job, a het component, a lone task) as it is. slurmctld
    takes a bracket form in one RPC and signals or cancels each task it names that
    still exists (a finished or unknown task in it is no error: scancel exits 0)."""
    tasks: dict[str, list[int]] = {}
    for r in refs:
        if (task := _task(r)) is not None:
            tasks.setdefault(task[0], []).append(task[1])
    out: list[str] = []
    done: set[str] = set()
    for r in refs:
        task = _task(r)
        if task is None or len(set(tasks[task[0]])) < 2:
            out.append(r)
        elif task[0] not in done:
            done.add(task[0])
            out.append(f"{task[0]}_[{format_array(tasks[task[0]])}]")
    return out


def _task(ref: str) -> tuple[str, int] | None:
    """``("123", 4)`` for an array task's ref ``123_4`` (``canonical_ref``); None for any
    other ref."""
    job = canonical_ref(ref)
    return None if job is None or job.task is None else (job.base, job.task)


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
