"""The daemon's view of a worker pool's items as jobs.

A trial run in a pool is a ``Job`` row like any other (``BatchKind.ITEMS``), whose ref
names a work item (``pool:<experiment>:t<trial>-s<seq>``) instead of a Slurm job.
``poll_items`` answers for those refs from the pool directory the way a backend answers
for jobs, so the reconciler and ``dethpc.control.job_end.judge`` treat a pool run exactly as a
job: waiting in ``work/`` is PENDING, held by a worker is RUNNING, a result is the
job's end (its exit record decides, as for a job), and an item handed back (its worker
was preempted, or its lease expired because its node died) is a requeue whose restart
count is the item's ``attempt``. ``cancel_items`` is ``scancel`` for items.

Owns: item refs, ``poll_items``, ``cancel_items``, ``plan_workers`` (how many workers a
pool wants, which to retire or cancel: a pure function).
Must not: touch the store or call a backend (the daemon does both).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dethpc.backends.base import JobInfo, JobState
from dethpc.common import worker_queue as queue
from dethpc.common.exitcodes import ExitReason
from dethpc.common.jobref import sort_key

PREFIX = "pool:"


def item_ref(exp_id: int, name: str) -> str:
    return f"{PREFIX}{exp_id}:{name}"


def parse_item_ref(ref: str) -> tuple[int, str] | None:
    """(experiment id, item name) of an item ref; None for any other ref."""
    if not ref.startswith(PREFIX):
        return None
    exp, _, name = ref[len(PREFIX):].partition(":")
    return (int(exp), name) if exp.isdigit() and name else None


def is_item_ref(ref: str) -> bool:
    return ref.startswith(PREFIX)


#: a result's reason -> the state its "job" ended in (the exit record says why)
_ENDED = {ExitReason.COMPLETED: JobState.COMPLETED, ExitReason.STOPPED: JobState.COMPLETED,
          ExitReason.CANCELLED: JobState.CANCELLED}


def _attempt(path: str) -> int | None:
    try:
        with open(path) as fh:
            return int(json.load(fh).get("attempt", 0))
    except (OSError, ValueError):
        return None


def _listdir(path: os.PathLike[str] | str) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


def poll_items(paths: queue.WorkerPoolPaths, refs: Iterable[str]) -> dict[str, JobInfo]:
    """The state of each item ref of one pool, as a backend's poll would give it: four
    directory listings, and one small read per item that is not waiting untouched."""
    work = set(_listdir(paths.work))
    returning = set(_listdir(paths.returning))
    results = set(_listdir(paths.results))
    taken = set(_listdir(paths.results / "taken"))
    held: dict[str, str] = {}
    for name in _listdir(paths.leases):
        if queue.LEASE_SEP in name:
            worker, _, item = name.partition(queue.LEASE_SEP)
            held[item] = name
    out: dict[str, JobInfo] = {}
    for ref in refs:
        parsed = parse_item_ref(ref)
        if parsed is None:
            continue
        file = f"{parsed[1]}.json"
        if file in results or file in taken:
            where = paths.results / file if file in results else paths.results / "taken" / file
            try:
                res = queue.RunResult.from_json(where.read_text())
            except (OSError, ValueError, TypeError):
                out[ref] = JobInfo(ref=ref, state=JobState.UNKNOWN)
                continue
            try:
                reason = ExitReason(res.reason)
            except ValueError:
                reason = ExitReason.ERROR
            state = _ENDED.get(reason, JobState.FAILED)
            out[ref] = JobInfo(ref=ref, state=state, raw_state=f"item {res.reason}",
                               exit_code=res.code,
                               restart_count=int(res.extra.get("attempt", 0)),
                               nodes=str(res.extra.get("node", "")))
        elif file in held:
            attempt = _attempt(str(paths.leases / held[file]))
            out[ref] = JobInfo(ref=ref, state=JobState.RUNNING, raw_state="item held",
                               restart_count=attempt or 0)
        elif file in work or file in returning:
            attempt = _attempt(str((paths.work if file in work else paths.returning) / file))
            if attempt is None:      # claimed between the listing and the read
                out[ref] = JobInfo(ref=ref, state=JobState.RUNNING, raw_state="item held")
                continue
            out[ref] = JobInfo(ref=ref, state=JobState.PENDING, raw_state="item waiting",
                               reason="waiting for a pool worker",
                               restart_count=attempt + (1 if file in returning else 0))
        else:
            out[ref] = JobInfo(ref=ref, state=JobState.UNKNOWN)
    return out


def cancel_items(paths: queue.WorkerPoolPaths, refs: Iterable[str]) -> None:
    """``scancel`` for items: one still waiting is taken out and ends cancelled; one a
    worker holds has its trial killed by that worker (``queue.kill``)."""
    for ref in refs:
        parsed = parse_item_ref(ref)
        if parsed is None:
            continue
        name = parsed[1]
        attempt = _attempt(str(paths.work / f"{name}.json")) or 0
        try:
            os.unlink(paths.work / f"{name}.json")
        except FileNotFoundError:
            if not (paths.results / f"{name}.json").exists():
                queue.kill(paths, name)
            continue
        trial, _, seq = name.partition("-")
        queue.write_result(paths, queue.RunResult(
            trial_id=int(trial[1:]), seq=int(seq[1:]), reason=str(ExitReason.CANCELLED),
            code=0, worker="", start_s=0.0, wall_s=0.0,
            extra={"withdrawn": True, "attempt": attempt}))


# ------------------------------------------------------------------ workers
@dataclass(frozen=True)
class Worker:
    """One worker task as this tick's poll saw it."""

    ref: str
    state: JobState


def gone_workers(workers: Sequence[Worker]) -> set[str]:
    """The refs of the workers whose job this poll saw not running: PENDING (requeued,
    or never started: it holds no lease then) or ended. RUNNING and SUSPENDED ones are
    alive (a suspended worker renews nothing until it resumes; a completing one is
    RUNNING here), and so is one the poll could not tell (UNKNOWN)."""
    return {w.ref for w in workers if w.state is JobState.PENDING
            or (w.state.is_terminal and w.state is not JobState.UNKNOWN)}


@dataclass(frozen=True)
class WorkerPlan:
    """What the daemon does to an experiment's workers this tick."""

    submit: int = 0                       # new worker tasks (one array)
    cancel: tuple[str, ...] = ()          # worker jobs to scancel (not started, surplus)
    retire: tuple[str, ...] = ()          # running workers that exit after their run
    keep: tuple[str, ...] = ()            # running workers no longer retired
    drain: bool = False                   # no work will come: idle workers exit
    undrain: bool = False                 # work came back (activate): remove the drain


def busy_workers(paths: queue.WorkerPoolPaths) -> set[str]:
    """The job refs of the workers that hold a lease now (run a trial); one listing."""
    refs = (queue.job_of_worker(name.partition(queue.LEASE_SEP)[0])
            for name in queue.active_leases(paths))
    return {r for r in refs if r}


def plan_workers(want: int, workers: Sequence[Worker], *, waiting: int, live_items: int,
                 active: bool, retired: Iterable[str] = (),
                 busy: Iterable[str] = ()) -> WorkerPlan:
    """How many workers to add, which to cancel, retire or keep.

    ``want``: the pool's size (> 0); ``workers``: the experiment's worker tasks as this
    tick saw them; ``waiting``: items no worker holds; ``live_items``: items not ended
    (waiting, held, or ended but not yet judged); ``active``: the experiment may get new
    work; ``retired``: workers already told to exit after their run; ``busy``: workers
    that hold a lease (``busy_workers``). A pool holds a worker only while there is work
    for it (GPUs held only while there is work, as Determined frees a trial's slots when
    it ends). Rules:

    * nothing live and no new work to come: drain, cancel the workers not started;
    * never more workers than live items: a surplus not started yet is cancelled
      (newest first); a surplus of running workers that hold no lease is retired at once
      (newest first: they exit at their next look, ``worker_queue.retired``). No work is
      lost by it: whatever the searcher makes of a live run's end (a promotion, a new
      trial) is taken by the worker that run frees, warm; and a run that ended but is
      not judged yet still counts as live, so its worker is kept for that. The pool
      itself shrunk below the running workers (``set-concurrency``): the newest are
      retired after their run;
    * items wait that no free worker (not started, or running without a lease) will
      take, and fewer workers than ``min(want, live items)``: un-retire retired ones
      first, then submit the rest; never more than those items (no worker is started
      for a run that has ended or that a free worker takes)."""
    live = [w for w in workers if not w.state.is_terminal]
    retired_set = {r for r in retired if any(w.ref == r for w in live)}
    if not active and live_items == 0:
        return WorkerPlan(drain=True, cancel=tuple(w.ref for w in live
                                                    if w.state == JobState.PENDING))
    busy_set = set(busy)
    target = min(want, live_items)
    counted = [w for w in live if w.ref not in retired_set]
    pending = sorted((w for w in counted if w.state == JobState.PENDING),
                     key=lambda w: sort_key(w.ref), reverse=True)
    running = sorted((w for w in counted if w.state != JobState.PENDING),
                     key=lambda w: sort_key(w.ref), reverse=True)
    cancel = [w.ref for w in pending[:max(0, len(counted) - target)]]
    retire = [w.ref for w in running[:max(0, len(running) - want)]]
    staying = [w for w in running if w.ref not in retire]
    idle = [w.ref for w in staying if w.ref not in busy_set]
    retire += idle[:max(0, len(staying) - live_items)]
    have = len(counted) - len(cancel) - len(retire)
    free = have - sum(1 for w in staying if w.ref in busy_set)
    keep: list[str] = []
    submit = 0
    need = min(target - have, waiting - free)
    if need > 0:
        keep = sorted(retired_set, key=sort_key)[:need]
        submit = need - len(keep)
    return WorkerPlan(submit=submit, cancel=tuple(cancel), retire=tuple(retire),
                      keep=tuple(keep), undrain=active and waiting > 0)
