"""Exit codes agreed between the training process, the job wrapper and the backends.

Owns: the numbers, and the mapping from a training exit code to an exit reason.
"""

from __future__ import annotations

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
