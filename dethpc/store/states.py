"""The states a stored experiment, trial and checkpoint can be in.

Owns: ``ExperimentState``, ``TrialState`` and ``CheckpointState`` (stored as their string
values; ``dethpc.store.models`` re-exports them for its tables).
Must not: import SQLAlchemy, sqlmodel or pydantic: the read-only path
(``dethpc.store.reader``, issue 47) turns its rows' strings into these without the ORM.
"""

from __future__ import annotations

from enum import StrEnum


class ExperimentState(StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    STOPPING_CANCELED = "STOPPING_CANCELED"  # cancel: ask trials to checkpoint and exit
    STOPPING_KILLED = "STOPPING_KILLED"      # kill: scancel everything now
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"

    @property
    def is_terminal(self) -> bool:
        return self in (ExperimentState.COMPLETED, ExperimentState.CANCELED,
                        ExperimentState.ERROR)

    @property
    def needs_daemon(self) -> bool:
        """Open and not paused: the daemon must act on it (a view says when none runs)."""
        return not self.is_terminal and self is not ExperimentState.PAUSED


class TrialState(StrEnum):
    QUEUED = "QUEUED"        # created, waiting for (re)submission or in the queue
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"        # exited cleanly on a pause; resumes on activate
    WAITING = "WAITING"      # promotion variant: finished a rung, waiting for the searcher
    COMPLETED = "COMPLETED"  # reached its searcher length
    STOPPED = "STOPPED"      # stopped by the searcher (early-stopped by ASHA)
    CANCELED = "CANCELED"
    ERROR = "ERROR"          # failed past max_restarts

    @property
    def is_terminal(self) -> bool:
        return self in (TrialState.COMPLETED, TrialState.STOPPED, TrialState.CANCELED,
                        TrialState.ERROR)


class CheckpointState(StrEnum):
    COMPLETED = "COMPLETED"
    #: GC chose it; its files are removed after the choice commits, then DELETED
    DELETING = "DELETING"
    DELETED = "DELETED"
