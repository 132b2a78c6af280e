"""What a phase records on an experiment when something outside the reconciler happens
to it: an event, a warning or a limit said once while it lasts, a failure.

Owns: ``event``, ``warn_once``, ``limit_event``, ``fail_experiment`` (an experiment with
jobs is stopped: STOPPING_KILLED) and ``fail_unstarted`` (one none of whose trials ever
got a job from the scheduler ends ERROR at once). Each is one transaction of its own.
Must not: call a backend, delete files, or decide whether something is a failure (the
phase that calls it does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlmodel import col, select

from dethpc.common.kinds import EventKind
from dethpc.store import Store
from dethpc.store.models import Event, Experiment, ExperimentState, Job, Trial, TrialState

log = logging.getLogger(__name__)


def event(store: Store, exp_id: int, kind: EventKind, message: str) -> None:
    with store.session() as s:
        s.add(Event(experiment_id=exp_id, kind=kind, message=message))


def warn_once(store: Store, exp_id: int, message: str) -> None:
    """A warning event on the experiment, unless its latest event says the same already."""
    log.error("experiment %s: %s", exp_id, message)
    with store.session() as s:
        last = s.exec(select(Event).where(Event.experiment_id == exp_id)
                      .order_by(col(Event.id).desc())).first()
        if last is None or last.message != message:
            s.add(Event(experiment_id=exp_id, kind=EventKind.WARNING, message=message))


def limit_event(store: Store, exp_id: int, message: str) -> None:
    """A ``limit`` event, unless the experiment's newest one already says the same (a wait
    that lasts many ticks is one event, and one more when it changes)."""
    with store.session() as s:
        last = s.exec(select(Event).where(Event.experiment_id == exp_id,
                                          Event.kind == EventKind.LIMIT)
                      .order_by(Event.id.desc())).first()  # type: ignore[union-attr]
        if last is not None and last.message == message:
            return
        s.add(Event(experiment_id=exp_id, kind=EventKind.LIMIT, message=message))


def fail_experiment(store: Store, exp_id: int, message: str) -> None:
    """An error event; an ACTIVE experiment is stopped (STOPPING_KILLED: the reconciler
    cancels its jobs and ends it)."""
    log.error("experiment %s: %s", exp_id, message)
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        if exp is None:
            return
        s.add(Event(experiment_id=exp_id, kind=EventKind.ERROR, message=message))
        if exp.state == ExperimentState.ACTIVE:
            exp.state = ExperimentState.STOPPING_KILLED
            exp.message = message
            s.add(exp)


def fail_unstarted(store: Store, exp_id: int, message: str,
                   clock: Callable[[], float]) -> None:
    """An experiment none of whose trials ever got a job from the scheduler (none with a
    ref: its image could not be pulled, or sbatch refused its first batch) ends ERROR at
    once, its trials too, with ``message`` as their exit reason, as Determined ends such
    an experiment; one with jobs is stopped (``fail_experiment``)."""
    with store.session() as s:
        started = s.exec(select(Job.id).where(Job.experiment_id == exp_id,
                                              col(Job.ref).is_not(None))).first()
        exp = s.get(Experiment, exp_id)
        if started is None and exp is not None and exp.state == ExperimentState.ACTIVE:
            log.error("experiment %s: %s", exp_id, message)
            for trial in s.exec(select(Trial).where(Trial.experiment_id == exp_id)):
                if not trial.state.is_terminal:
                    trial.state, trial.needs_job = TrialState.ERROR, False
                    trial.exit_reason = message
                    s.add(trial)
            exp.state, exp.message, exp.ended_at = ExperimentState.ERROR, message, clock()
            s.add(exp)
            s.add(Event(experiment_id=exp_id, kind=EventKind.ERROR, message=message))
            return
    fail_experiment(store, exp_id, message)
