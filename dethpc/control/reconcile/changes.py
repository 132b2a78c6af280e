"""The typed change a rule asks of one trial (pure values).

Owns: ``TrialChange`` -- what a decision does to a trial row: whether it needs a job,
its stop request cleared, its new state and exit reason, an event, and the exit the
searcher is told of -- with ``Note`` (an event's kind and message); how a trial ended,
as the searcher is told, is ``dethpc.common.exitcodes.TrialExit`` (the one vocabulary
the searchers accept). ``job_rules`` and ``stop_rules`` return them;
``searcher_ops.SearcherOps.settle`` applies one, in this field order.
Must not: touch rows or files, or decide anything (the rule modules do).
"""

from __future__ import annotations

from dataclasses import dataclass

from dethpc.common.exitcodes import TrialExit
from dethpc.common.kinds import EventKind
from dethpc.store.models import TrialState


@dataclass(frozen=True)
class Note:
    """One event: its kind and message."""

    kind: EventKind
    message: str


@dataclass(frozen=True)
class TrialChange:
    """What happens to one trial, applied in field order."""

    #: the trial needs a (new) job, or no longer does; None: unchanged
    needs_job: bool | None = None
    #: the trial's stop request is over (it stopped)
    clear_stop: bool = False
    #: the trial's new state (None: unchanged) and the exit reason stored with it
    state: TrialState | None = None
    reason: str = ""
    #: an event about the trial
    note: Note | None = None
    #: the searcher is told the trial exited, and how
    exited: TrialExit | None = None
