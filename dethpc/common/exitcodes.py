"""Exit codes agreed between the training process, the job wrapper and the backends.

Owns: the numbers, the reasons a run ends (``ExitReason``) and the shape of the record
each run's end appends to ``exits.jsonl`` (``exit_record``: written by the job scripts'
``dethpc.launch.run_end`` and by a pool worker for each run it forked; read by
``dethpc.control.job_end``).
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


def exit_record(reason: ExitReason, code: int, run: int, job: str, signal: str,
                at: float, nodes: Sequence[str] = ()) -> dict[str, object]:
    """One line of ``exits.jsonl``: why run ``run`` of job ``job`` ended (and, on Slurm,
    on which ``nodes``)."""
    rec: dict[str, object] = {"reason": reason.value, "code": code, "restart": run,
                              "job": job, "signal": signal, "time": int(at)}
    if nodes:
        rec["nodes"] = list(nodes)
    return rec
