"""What a tick may skip at thousands of trials: pure rules over one live job's row.

Owns: ``LiveRow`` (a live job and its trial as the tick's first query reads them, no
ORM object built), ``quiet_job`` (a job and trial this tick cannot change: neither row
is loaded), ``new_reasons`` (the pending reasons of quiet jobs to store in one
statement) and ``nothing_written_yet`` (a trial whose files need not be opened).
``job_end.nothing_to_judge`` is the fourth such rule (a job ``judge`` would wait on).
docs/architecture.md ("A tick at scale") measures what each saves.
Must not: query the store, read files or hold state; ``rows.TickRows`` acts on them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dethpc.backends.base import JobInfo, JobState
from dethpc.store.models import TrialState


class LiveRow(NamedTuple):
    """One live job and its trial, in the columns (and order) of the tick's first query.
    A plain tuple of the same 13 values reads the same to ``quiet_job``."""

    job_id: int
    trial_id: int
    ref: str | None
    state: JobState
    restart_count: int
    unknown_ticks: int
    reason: str
    nodes: str
    trial_state: TrialState
    steps: int
    restarts: int
    runs: int
    stop_requested_at: float | None


def nothing_written_yet(state: JobState, restart_count: int, *, ingested: bool) -> bool:
    """A trial whose job this very poll saw pending, never requeued, and of which nothing
    was ever ingested has no file to read: its ingest (two failed opens and the paths)
    is skipped, which at thousands of pending trials was a third of a tick. A job that
    starts after the poll is read on the next tick, from offset 0, so nothing is lost."""
    return state == JobState.PENDING and restart_count == 0 and not ingested


def quiet_job(row: LiveRow, info: JobInfo | None, *, fast: bool = False) -> bool:
    """A live job (and its trial) that this tick cannot change, so neither row is loaded.
    Pending since it was submitted, never run, nothing changed: the poll (``info``) sees
    it pending, never requeued; the trial QUEUED, nothing trained, no restart, no stop
    asked. Between polls (``fast``: no ``info``) the stored state decides. Such a job's
    ``observe`` would at most store a new pending reason (the caller does that for all
    of them in one statement: ``new_reasons``), its ingest is skipped
    (``nothing_written_yet``) and ``judge`` waits (``nothing_to_judge``)."""
    (_, _, _, state, restart_count, unknown_ticks, _, nodes, trial_state, steps,
     restarts, runs, stop_at) = row   # by position: the query's row, or a plain tuple
    if not (state == JobState.PENDING and restart_count == 0 and unknown_ticks == 0
            and trial_state == TrialState.QUEUED and steps == 0 and restarts == 0
            and runs == 0 and stop_at is None):
        return False
    if info is None:
        return fast
    return (info.state == JobState.PENDING and info.restart_count == 0
            and (info.nodes or nodes) == nodes)


def new_reasons(quiet_rows: list[LiveRow], infos: dict[str, JobInfo]) -> list[dict[str, Any]]:
    """``{"jid": job id, "r": reason}`` for each quiet job whose pending reason this poll
    reads differently (Slurm moves thousands of pending jobs between None, Priority,
    Resources and JobArrayTaskLimit as it schedules: loading each one's rows to store it
    made most pending jobs loud on the dev cluster at 10,000 trials)."""
    out = []
    for row in quiet_rows:
        info = infos.get(row.ref or "")
        if info is not None and info.reason != row.reason:
            out.append({"jid": row.job_id, "r": info.reason})
    return out
