"""The emulated trials' work log, and the exact count of useful, redone and lost steps.

Owns: the log's vocabulary (``Event``, ``EndReason``), appending one record as one JSON
line (``WorkLog``: a single ``write`` on an ``O_APPEND`` descriptor, so many processes
share one file without tearing lines), reading a log back (``read_log``: a line torn by a
crash is skipped), ``count_work``: the pure function that turns records into, per
trial, the steps executed, useful, redone and lost, and their seconds, and
``count_thrown``: per trial, the steps its cut runs executed after their last checkpoint
(what a fault threw away, done again or not).

A record: ``{"trial", "run", "event", "step", "wall"}`` plus, by event, ``seconds`` (the
step's own duration; the start-up's), ``loss``, ``ckpt`` (a checkpoint's id) and
``reason``. One *run* is one process's life of a trial: it starts, may load one
checkpoint (first), executes steps ``load+1, load+2, ...``, may save checkpoints, and
ends with an ``end`` record -- or without one, when it was killed.

How work is counted (``count_work``): a trial is *decided* when its last run ended
``completed`` or ``stopped``. Its *lineage* is the last run's steps, then the steps of
the run that saved the checkpoint that run loaded, up to that save, and so on back to a
run that loaded nothing. Steps in the lineage are *useful*; every other executed step is
*redone* when the lineage holds a step of that number (the work was done again) and
*lost* when it does not. Every step of an undecided trial (no decided end in the log) is
``lost`` here; whether the *trial* is lost, unfinished, or decided by the system after
all (a stop recorded, then the process killed in its save) is ``metrics.trial_fates``'s
rule, which also weighs what the system itself recorded. So
``executed == useful + redone + lost`` for every trial, exactly.
Must not: sleep, or know which system ran the trial.
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class Event(enum.Enum):
    START = "start"        # the process began the trial: ``pid``, ``container`` (job run key)
    READY = "ready"        # start-up over: ``seconds``, ``container_s`` and ``cuda_s`` paid
    LOAD = "load"          # a checkpoint was restored: ``step``, ``ckpt``
    STEP = "step"          # step ``step`` executed, taking ``seconds``
    VALIDATE = "validate"  # validation after ``step``: ``loss``
    SAVE = "save"          # checkpoint ``ckpt`` saved at ``step``
    END = "end"            # the run ended cleanly: ``reason``


class EndReason(enum.Enum):
    COMPLETED = "completed"  # trained to the end of its length: decided
    STOPPED = "stopped"      # the searcher stopped it: decided
    PREEMPTED = "preempted"  # it checkpointed and left, to resume later
    FAILED = "failed"        # it ended on an error


DECIDED = frozenset({EndReason.COMPLETED, EndReason.STOPPED})


class WorkLog:
    """Appends records to ``path`` (one JSON line, one ``write``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, record: Mapping[str, Any]) -> None:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def read_log(path: Path) -> list[dict[str, Any]]:
    """The records of ``path`` in file order; a torn (unparsable) line is skipped."""
    out: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


@dataclass(frozen=True)
class TrialWork:
    trial: str
    decided: bool
    runs: int
    executed: int
    useful: int
    redone: int
    lost: int
    executed_s: float
    redone_s: float
    lost_s: float
    #: how the trial's last run ended (None: it wrote no ``end``: killed, or still running)
    last_end: EndReason | None = None
    #: decided by the system's record, not by its last run's end (``count_work``'s
    #: ``decided``)
    decided_elsewhere: bool = False


@dataclass
class _Run:
    name: str
    loaded: str | None = None
    steps: list[tuple[int, float]] = field(default_factory=list)
    #: checkpoint id -> how many of ``steps`` it holds
    saves: dict[str, int] = field(default_factory=dict)
    end: EndReason | None = None


def _runs(records: Iterable[Mapping[str, Any]]) -> dict[str, list[_Run]]:
    """Per trial, its runs in the order they started."""
    trials: dict[str, dict[str, _Run]] = {}
    for rec in records:
        run = trials.setdefault(str(rec["trial"]), {}).setdefault(
            str(rec["run"]), _Run(str(rec["run"])))
        event = Event(rec["event"])
        if event is Event.LOAD:
            if run.steps or run.loaded is not None:
                raise ValueError(f"trial {rec['trial']} run {run.name}: a load after its "
                                 "first step (a run loads at most once, before training)")
            run.loaded = str(rec["ckpt"])
        elif event is Event.STEP:
            run.steps.append((int(rec["step"]), float(rec.get("seconds", 0.0))))
        elif event is Event.SAVE:
            run.saves[str(rec["ckpt"])] = len(run.steps)
        elif event is Event.END:
            run.end = EndReason(rec["reason"])
    return {t: list(runs.values()) for t, runs in trials.items()}


def _lineage(trial: str, runs: list[_Run]) -> set[tuple[int, int]]:
    """``(run index, position)`` of every useful step execution of a decided trial."""
    saved_by = {ckpt: (i, held) for i, r in enumerate(runs) for ckpt, held in r.saves.items()}
    last = len(runs) - 1
    useful = {(last, k) for k in range(len(runs[last].steps))}
    ckpt = runs[last].loaded
    seen: set[str] = set()
    while ckpt is not None:
        if ckpt not in saved_by:
            raise ValueError(f"trial {trial}: a run loaded checkpoint {ckpt}, which no run "
                             "of the log saved (is the log whole?)")
        if ckpt in seen:
            raise ValueError(f"trial {trial}: checkpoint {ckpt} loops back on itself")
        seen.add(ckpt)
        i, held = saved_by[ckpt]
        useful |= {(i, k) for k in range(held)}
        ckpt = runs[i].loaded
    return useful


def count_trial(trial: str, runs: list[_Run], decided_elsewhere: bool = False) -> TrialWork:
    """``decided_elsewhere``: the system recorded the trial decided though its last run
    wrote no decided end (killed in the save after the searcher's stop): its lineage is
    then counted from that last run, as a decided trial's."""
    decided = runs[-1].end in DECIDED or decided_elsewhere
    useful = _lineage(trial, runs) if decided else set()
    kept = {runs[i].steps[k][0] for i, k in useful}
    executed = redone = lost = 0
    executed_s = redone_s = lost_s = 0.0
    for i, run in enumerate(runs):
        for k, (step, seconds) in enumerate(run.steps):
            executed += 1
            executed_s += seconds
            if (i, k) in useful:
                continue
            if step in kept:
                redone += 1
                redone_s += seconds
            else:
                lost += 1
                lost_s += seconds
    return TrialWork(trial=trial, decided=decided, runs=len(runs), executed=executed,
                     useful=len(useful), redone=redone, lost=lost, executed_s=executed_s,
                     redone_s=redone_s, lost_s=lost_s, last_end=runs[-1].end,
                     decided_elsewhere=decided and runs[-1].end not in DECIDED)


@dataclass(frozen=True)
class Thrown:
    """One trial's work that its cut runs threw away (``count_thrown``)."""

    trial: str
    #: runs that ended without a clean end (killed, or ``failed``) and are not still
    #: being worked on at the cut
    cut_runs: int
    #: of them, those the trial never ran again (no later run of it in the log)
    never_resumed: int
    #: steps the cut runs executed after their last checkpoint save, and their seconds
    steps: int
    seconds: float


def count_thrown(records: Iterable[Mapping[str, Any]], in_progress: Set[str] = frozenset(),
                 decided: Set[str] = frozenset()) -> tuple[Thrown, ...]:
    """The work each trial's faults threw away, whether or not it was done again: the
    steps every *cut* run (no ``end`` record, or ended ``failed``) executed after its last
    checkpoint save. ``redone`` counts only work executed twice, so a trial whose killed
    run was never resumed (a system that did not recover it, or not yet) shows none
    there; here it shows what its cut run lost. Not cut: a run that ended completed,
    stopped or preempted (a preemption saves as it leaves), the last run of a trial
    still worked on at the cut (``in_progress``: ``metrics.in_progress``) and the last
    run of a trial the system recorded decided (``decided``: killed in its save after
    the searcher's stop; its steps are the lineage). Trials with nothing cut are left
    out."""
    out: list[Thrown] = []
    for trial, runs in sorted(_runs(records).items()):
        cut = never = steps = 0
        seconds = 0.0
        last = len(runs) - 1
        for i, run in enumerate(runs):
            if run.end is not None and run.end is not EndReason.FAILED:
                continue
            if i == last and (trial in in_progress or trial in decided):
                continue
            held = max(run.saves.values(), default=0)
            cut += 1
            never += i == last
            steps += len(run.steps) - held
            seconds += sum(s for _, s in run.steps[held:])
        if cut:
            out.append(Thrown(trial, cut, never, steps, seconds))
    return tuple(out)


@dataclass(frozen=True)
class WorkReport:
    trials: tuple[TrialWork, ...]

    @property
    def trials_undecided(self) -> int:
        """Trials the log alone does not show decided: lost *or* unfinished, which only
        ``metrics.trial_fates`` tells apart (with the system's own final states)."""
        return sum(not t.decided for t in self.trials)

    def total(self, name: str) -> float:
        """The sum of one ``TrialWork`` field over every trial (e.g. ``redone_s``)."""
        return sum(float(getattr(t, name)) for t in self.trials)


def count_work(records: Iterable[Mapping[str, Any]],
               decided: Set[str] = frozenset()) -> WorkReport:
    """Useful, redone and lost steps of every trial in ``records`` (see the module doc).
    Records are taken in log order: a trial's runs are ordered by their first record.
    ``decided``: trials the system recorded decided (``metrics.trial_fates``), counted
    as decided whatever their last run's end."""
    return WorkReport(tuple(count_trial(t, runs, t in decided)
                            for t, runs in sorted(_runs(records).items())))
