"""Exit codes agreed between the training process, the job wrapper and the backends.

Owns: the numbers, the exit vocabulary and the shape of the record each run's end
appends to ``exits.jsonl`` (``exit_record``: written by the job scripts'
``dethpc.launch.run_end`` and by a pool worker for each run it forked; read by
``dethpc.control.job_end``).

The exit vocabulary has two levels, one enum each:

* ``ExitReason``: why one *run* of a job ended (the job side decides it, ``exits.jsonl``
  and ``Job.exit_reason`` keep it). Most runs are not a trial's end: a preempted run
  is followed by another.
* ``TrialExit``: how a *trial* ended for good, as its searcher is told
  (``Searcher.on_exited``). The reconciler maps a judged job end to it: a run
  ``completed`` -> ``COMPLETED`` (or the training code's early exit, ``INVALID_HP`` /
  ``USER_REQUESTED_STOP``); a trial that failed for good (``error``, ``node_fail`` ...
  past ``max_restarts``) -> ``ERRORED``; a stop the searcher or a cancel asked for
  -> ``STOPPED``. ``CANCELLED`` is Determined's word, accepted from a replayed snapshot.
  The values shared by both (``completed``, ``stopped``) mean the same end.

``Trial.exit_reason`` in the store is neither: a sentence for people (what ended the
trial and why, e.g. ``stopped by the searcher``, ``submitter died``).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

#: training process checkpointed after a preemption/time-limit signal: requeue me
EXIT_PREEMPTED = 80
#: training process checkpointed after a stop request (searcher stop, pause): do not requeue
EXIT_STOPPED = 81
#: what the job wrapper exits with on the *local* backend to ask for a requeue
LOCAL_REQUEUE_EXIT = 85


class ExitReason(StrEnum):
    """Why a job of a trial ended (recorded in exits.jsonl and the store)."""

    COMPLETED = "completed"      # reached its target length
    PREEMPTED = "preempted"      # partition preemption (signal at preemption)
    TIME_LIMIT = "time_limit"    # walltime signal
    REQUEUED = "requeued"        # requeued by a user (scontrol requeue)
    STOPPED = "stopped"          # stopped by the searcher or a pause
    NODE_FAIL = "node_fail"      # node died / job lost
    ERROR = "error"              # training code failed
    CANCELLED = "cancelled"      # scancel outside dethpc / kill
    HUNG = "hung"                # no progress for max_idle: ended by the hang watchdog


class TrialExit(StrEnum):
    """How a trial ended for good, as its searcher is told (``Searcher.on_exited``; the
    reconciler's ``TrialChange.exited``; a replayed ``exited`` call). Searcher snapshots
    and replay events hold the values: do not rename them."""

    COMPLETED = "completed"      # reached its length
    STOPPED = "stopped"          # stopped by the searcher, or cancelled by the user
    ERRORED = "errored"          # failed for good
    CANCELLED = "cancelled"      # Determined's; dethpc itself reports STOPPED
    #: the training code reported an early exit (``Trial.early_exit``) and ended well:
    #: it raised ``det.InvalidHP`` (its hyperparameters are dropped, Determined's
    #: ``trialExitedEarly`` with ``InvalidHP``) ...
    INVALID_HP = "invalid_hp"
    #: ... or chose to stop early (treated as any other early exit, like ``STOPPED``)
    USER_REQUESTED_STOP = "user_requested_stop"


def exit_record(reason: ExitReason, code: int, run: int, job: str, signal: str,
                at: float, nodes: Sequence[str] = ()) -> dict[str, object]:
    """One line of ``exits.jsonl``: why run ``run`` of job ``job`` ended (and, on Slurm,
    on which ``nodes``)."""
    rec: dict[str, object] = {"reason": reason.value, "code": code, "restart": run,
                              "job": job, "signal": signal, "time": int(at)}
    if nodes:
        rec["nodes"] = list(nodes)
    return rec
