"""The poll and cancel phases on their own (``dethpc.control.daemon.poll``, ``.cancel``):
which refs go to the backend and which to a worker pool's directory (tables), one
backend call each, and what a cancel clears. Real SQLite, a recording backend."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlmodel import select

from dethpc.backends.base import JobInfo, JobState
from dethpc.common.errors import CommandError
from dethpc.control.daemon.cancel import Canceller, split_refs, wanted_refs
from dethpc.control.daemon.poll import Poller, PollPlan, poll_plan
from dethpc.control.daemon.shared import Scope, TickStats
from dethpc.control.worker_pool_tend import WorkerPoolTender
from dethpc.control.worker_pool_view import item_ref
from dethpc.store.models import Batch, BatchKind, BatchState, Job
from tests.unit.control.daemon_kit import CountingGuard, World, world

ITEM = item_ref(1, "t3-s0")


@pytest.mark.parametrize(("live", "workers", "expected"), [
    ([], [], PollPlan([], [], 0)),
    (["5_0", "5_1"], [], PollPlan(["5_0", "5_1"], [], 2)),
    # workers are polled with the jobs; the tick counts them when no item is live ...
    (["5_0"], ["9_0", "9_1"], PollPlan(["5_0", "9_0", "9_1"], [], 3)),
    # ... and counts only the live refs when items are (as the daemon always has)
    (["5_0", ITEM], ["9_0"], PollPlan(["5_0", "9_0"], [ITEM], 2)),
    ([ITEM], [], PollPlan([], [ITEM], 1)),
])
def test_poll_plan(live: list[str], workers: list[str], expected: PollPlan) -> None:
    assert poll_plan(live, workers) == expected


@pytest.mark.parametrize(("refs", "items", "jobs"), [
    ([], [], []),
    (["5_0", ITEM, "6"], [ITEM], ["5_0", "6"]),
])
def test_split_refs(refs: list[str], items: list[str], jobs: list[str]) -> None:
    assert split_refs(refs) == (items, jobs)


@pytest.mark.parametrize(("wanted", "refs"), [
    ([], []), (["5_1", "5_0", "5_1"], ["5_0", "5_1"]), (["6", "10"], ["10", "6"]),
])
def test_wanted_refs(wanted: list[str], refs: list[str]) -> None:
    assert wanted_refs(wanted) == refs


def worker_pools(w: World) -> WorkerPoolTender:
    return WorkerPoolTender(w.store, w.cluster, w.backend, python="python3", tag="t",
                      budget=None, files=None)  # type: ignore[arg-type]


def live_jobs(w: World, refs: list[str], *, cancel_due: bool = False) -> None:
    trials = w.add_trials(len(refs), needs_job=False)
    with w.store.session() as s:
        batch = Batch(experiment_id=w.exp_id, name="b", size=len(refs),
                      state=BatchState.SUBMITTED)
        s.add(batch)
        s.flush()
        assert batch.id is not None
        for i, (t, ref) in enumerate(zip(trials, refs, strict=True)):
            assert t.id is not None
            s.add(Job(experiment_id=w.exp_id, trial_id=t.id, batch_id=batch.id,
                      array_index=i, ref=ref, cancel_due=cancel_due))


def test_one_poll_of_the_live_jobs_and_the_pool_workers_then_the_users_jobs(
        tmp_path: Path) -> None:
    w = world(tmp_path)
    live_jobs(w, ["5_0", "5_1"])
    with w.store.session() as s:
        s.add(Batch(experiment_id=w.exp_id, name="w", size=2, kind=BatchKind.WORKERS,
                    state=BatchState.SUBMITTED, array_job_id="9"))
    w.backend.states = {"5_0": JobState.RUNNING}
    w.backend.user = [JobInfo(ref="5_0", state=JobState.RUNNING)]
    stats = TickStats()
    seen = Poller(w.store, w.backend, worker_pools(w), Scope()).observe(stats, [w.exp_id])
    assert w.backend.calls == [("poll", ["5_0", "5_1", "9_0", "9_1"]), ("user_jobs", None)]
    assert seen.infos["5_0"].state == JobState.RUNNING
    assert seen.user_jobs == w.backend.user and stats.polled == 4


def test_another_owners_jobs_are_not_polled(tmp_path: Path) -> None:
    w = world(tmp_path)
    live_jobs(w, ["5_0"])
    Poller(w.store, w.backend, worker_pools(w), Scope("somebody-else")).poll(TickStats(), [])
    assert w.backend.calls == [("poll", [])]


def test_the_cancel_phase_checks_the_lease_then_cancels_once_and_clears_what_was_due(
        tmp_path: Path) -> None:
    w = world(tmp_path)
    live_jobs(w, ["5_0", "5_1"], cancel_due=True)
    guard = CountingGuard()
    stats = TickStats()
    Canceller(w.store, w.backend, worker_pools(w), guard).cancel_wanted(
        ["5_1", "5_0", "5_1"], stats)
    assert w.backend.calls == [("cancel", ["5_0", "5_1"])]
    assert guard.checks == 1 and stats.cancelled == 2
    with w.store.session() as s:
        assert not any(j.cancel_due for j in s.exec(select(Job)))


def test_nothing_wanted_cancels_nothing(tmp_path: Path) -> None:
    w = world(tmp_path)
    guard = CountingGuard()
    Canceller(w.store, w.backend, worker_pools(w), guard).cancel_wanted([], TickStats())
    assert w.backend.calls == [] and guard.checks == 0


def test_a_failed_cancel_reaches_the_caller_and_the_jobs_stay_due(tmp_path: Path) -> None:
    w = world(tmp_path)
    live_jobs(w, ["5_0"], cancel_due=True)
    w.backend.cancel_error = CommandError(["scancel"], 1, "", "slurmctld away")
    with pytest.raises(CommandError):
        Canceller(w.store, w.backend, worker_pools(w), CountingGuard()).cancel_wanted(
            ["5_0"], TickStats())
    with w.store.session() as s:
        assert all(j.cancel_due for j in s.exec(select(Job)))


# ------------------------------------------------------------ the cadence (pool_poll_s)
W = frozenset({"9_0", "9_1"})


@pytest.mark.parametrize(("since", "jobs", "workers_only", "dirty", "every", "due"), [
    (None, ["9_0", "9_1"], True, False, 10.0, True),     # no poll yet
    (1.0, ["9_0", "9_1"], True, False, 10.0, False),     # workers, answered 1 s ago
    (10.0, ["9_0", "9_1"], True, False, 10.0, True),     # ... 10 s ago
    (1.0, ["9_0", "9_1"], True, True, 10.0, True),       # a submit or cancel since
    (1.0, ["9_0", "9_1", "9_2"], True, False, 10.0, True),  # a worker the poll never saw
    (1.0, ["5_0", "9_0", "9_1"], False, False, 10.0, True),  # a job of its own: every tick
    (1.0, ["9_0", "9_1"], True, False, 0.0, True),       # pool_poll_s 0: every tick
    (1.0, [], True, False, 10.0, False),
])
def test_poll_due(since: float | None, jobs: list[str], workers_only: bool, dirty: bool,
                  every: float, due: bool) -> None:
    from dethpc.control.daemon.poll import poll_due
    assert poll_due(since_last_s=since, jobs=jobs, last_jobs=W, workers_only=workers_only,
                    dirty=dirty, pool_poll_s=every) is due


def test_a_pools_workers_are_polled_every_pool_poll_s_not_every_tick(tmp_path: Path) -> None:
    """Only workers live (their runs report through files): the backend is asked once
    per ``pool_poll_s``, the last answer stands between; a submit or cancel, or a live
    job of the experiment's own, brings the poll back at once."""
    w = world(tmp_path)
    with w.store.session() as s:
        s.add(Batch(experiment_id=w.exp_id, name="w", size=2, kind=BatchKind.WORKERS,
                    state=BatchState.SUBMITTED, array_job_id="9"))
    w.backend.states = {"9_0": JobState.RUNNING, "9_1": JobState.PENDING}
    now, cancels = [100.0], [0]
    poller = Poller(w.store, w.backend, worker_pools(w), Scope(), pool_poll_s=10.0,
                    monotonic=lambda: now[0], actions=lambda: cancels[0])

    def tick() -> dict[str, JobInfo]:
        return poller.observe(TickStats(), [w.exp_id]).infos

    def polls() -> int:
        return w.backend.names().count("poll")
    first = tick()
    assert polls() == 1 and first["9_0"].state == JobState.RUNNING
    w.backend.states["9_1"] = JobState.RUNNING
    now[0] += 5.0
    assert tick() == first and polls() == 1                  # the last answer stands
    now[0] += 5.0
    assert tick()["9_1"].state == JobState.RUNNING and polls() == 2
    now[0] += 1.0
    cancels[0] += 1                                          # the daemon cancelled a job
    tick()
    assert polls() == 3
    assert tick() and polls() == 3
    with w.store.session() as s:                             # a worker array submitted
        s.add(Batch(experiment_id=w.exp_id, name="w2", size=1, kind=BatchKind.WORKERS,
                    state=BatchState.SUBMITTED, array_job_id="12"))
    assert "12_0" in tick() and polls() == 4
    assert tick() and polls() == 4
    assert poller.observe(TickStats(), [w.exp_id], force=True) and polls() == 5
    live_jobs(w, ["5_0"])                                    # a job of its own
    tick()
    tick()
    assert polls() == 7
    assert (poller.polls, poller.skipped) == (7, 3)


# ------------------------------------------- the quiet cadence (pool_quiet_poll_s)
@pytest.mark.parametrize(("since", "accounted", "quiet", "due"), [
    (5.0, False, 60.0, False),      # under pool_poll_s: the files are not even read
    (10.0, False, 60.0, True),      # the files disagree: pool_poll_s, as before
    (10.0, True, 60.0, False),      # they agree: the last answer stands ...
    (59.0, True, 60.0, False),
    (60.0, True, 60.0, True),       # ... until pool_quiet_poll_s
    (10.0, True, 0.0, True),        # pool_quiet_poll_s 0: pool_poll_s alone
    (10.0, True, 5.0, True),        # a quiet cadence under pool_poll_s changes nothing
])
def test_poll_due_quiet(since: float, accounted: bool, quiet: float, due: bool) -> None:
    from dethpc.control.daemon.poll import poll_due
    asked: list[bool] = []

    def files_agree() -> bool:
        asked.append(True)
        return accounted
    assert poll_due(since_last_s=since, jobs=["9_0", "9_1"], last_jobs=W, workers_only=True,
                    dirty=False, pool_poll_s=10.0, quiet_poll_s=quiet,
                    accounted=files_agree) is due
    assert not (asked and since < 10.0)


R, P, C = JobState.RUNNING, JobState.PENDING, JobState.COMPLETED


@pytest.mark.parametrize(("states", "present", "agree"), [
    ({"9_0": R, "9_1": R}, {"9_0", "9_1"}, True),
    ({"9_0": R, "9_1": R}, {"9_0"}, False),             # 9_1 exited or was killed
    ({"9_0": R, "9_1": P}, {"9_0"}, True),              # pending: not started ...
    ({"9_0": R, "9_1": P}, {"9_0", "9_1"}, True),       # ... or started since
    ({"9_0": R, "9_1": C}, {"9_0"}, True),              # ended, and its file gone
    ({"9_0": R, "9_1": C}, {"9_0", "9_1"}, False),      # ended, yet a file: requeued?
    ({"9_0": JobState.SUSPENDED, "9_1": R}, {"9_1"}, False),   # stopped: no heartbeat
    ({"9_0": R}, {"9_0", "9_1"}, False),                # 9_1 not in the answer
    ({"9_0": R, "9_1": R}, set(), False),               # workers of a version without it
])
def test_workers_accounted(states: dict[str, JobState], present: set[str],
                           agree: bool) -> None:
    from dethpc.control.daemon.poll import workers_accounted
    last = {r: JobInfo(ref=r, state=st) for r, st in states.items()}
    assert workers_accounted(last, ["9_0", "9_1"], present) is agree


def test_a_pool_whose_files_agree_is_polled_every_pool_quiet_poll_s(tmp_path: Path) -> None:
    """The workers' ``pool/alive`` files (real files, their mtimes set) agree with the
    last answer: the backend is asked every ``pool_quiet_poll_s``, not every
    ``pool_poll_s``; a worker's file gone (it exited) or gone stale (killed) brings back
    ``pool_poll_s``; an experiment whose config the tick did not give is polled as
    before."""
    import os

    from dethpc.common import worker_queue as queue
    from dethpc.control.resolved import Resolved
    w = pool_world(tmp_path)
    paths = queue.WorkerPoolPaths.of_run_dir(Path(w.experiment().run_dir))
    resolved = {w.exp_id: Resolved.of(w.experiment(), w.cluster)}
    wp = resolved[w.exp_id].worker_pool()
    assert wp is not None and wp.heartbeat_s == 5.0
    w.backend.states = {"9_0": JobState.RUNNING, "9_1": JobState.PENDING}
    now = [100.0]
    poller = Poller(w.store, w.backend, worker_pools(w), Scope(), pool_poll_s=10.0,
                    pool_quiet_poll_s=60.0, monotonic=lambda: now[0])

    def tick(configs: dict[int, Resolved] | None = resolved) -> None:
        poller.observe(TickStats(), [w.exp_id], resolved=configs)

    def polls() -> int:
        return w.backend.names().count("poll")
    queue.announce(paths, "9_0")
    tick()
    assert polls() == 1
    for _ in range(4):                       # 40 s: the files agree, the answer stands
        now[0] += 10.0
        tick()
    assert polls() == 1 and poller.skipped == 4
    now[0] += 20.0                           # 60 s since the poll
    tick()
    assert polls() == 2
    now[0] += 10.0
    tick(None)                               # no configs: pool_poll_s
    assert polls() == 3
    queue.leave(paths, "9_0")                # 9_0 exited: Slurm's answer is out of date
    now[0] += 10.0
    tick()
    assert polls() == 4
    queue.announce(paths, "9_0")
    now[0] += 10.0
    tick()
    assert polls() == 4                      # agreeing again
    stale = time.time() - 3 * wp.heartbeat_s - 1
    os.utime(paths.alive / "9_0", (stale, stale))   # killed: not renewed in 3 beats
    now[0] += 10.0
    tick()
    assert polls() == 5


def test_the_daemons_cancels_count_as_actions_for_the_poll(tmp_path: Path) -> None:
    from dethpc.control.daemon import Daemon
    w = world(tmp_path)
    daemon = Daemon(w.store, w.cluster, w.backend)
    before = daemon.poller.actions()
    daemon.canceller.cancel(["5_0", item_ref(1, "t1-s0")])   # an item is no backend job
    assert daemon.poller.actions() == before + 1


def pool_world(tmp_path: Path) -> World:
    """A pool experiment: its worker array ``9`` of 2 tasks submitted, one trial's item
    live in the queue (an ITEMS batch)."""
    from dethpc.common import worker_queue as queue
    w = world(tmp_path, slurm={"workers": 2})
    queue.WorkerPoolPaths.of_run_dir(Path(w.experiment().run_dir)).create()
    with w.store.session() as s:
        s.add(Batch(experiment_id=w.exp_id, name="w", size=2, kind=BatchKind.WORKERS,
                    state=BatchState.SUBMITTED, array_job_id="9"))
    trials = w.add_trials(1, needs_job=False)
    batch = w.add_batch(trials, name="items", ref=item_ref(w.exp_id, "t1-s0"), live=True)
    with w.store.session() as s:
        b = s.get(Batch, batch)
        assert b is not None
        b.kind = BatchKind.ITEMS
        s.add(b)
    return w


def test_a_worker_read_pending_by_an_older_poll_is_not_cancelled(tmp_path: Path) -> None:
    """The pool's plan cancels a surplus worker that has not started. On states the last
    poll gave (``fresh`` False) that worker may be running a trial by now (f19 of this
    change: a run got TERM and counted as preempted), so the cancel waits for a poll of
    its own: none now, and the daemon's count of put-off cancels makes the next tick
    poll."""
    w = pool_world(tmp_path)
    infos = {"9_0": JobInfo(ref="9_0", state=JobState.RUNNING),
             "9_1": JobInfo(ref="9_1", state=JobState.PENDING)}
    tender = worker_pools(w)
    tender.tend(w.exp_id, infos, fresh=False)
    assert "cancel" not in w.backend.names()
    assert (tender.cancels_put_off, tender.workers_cancelled) == (1, 0)
    tender.tend(w.exp_id, infos, fresh=True)
    assert w.backend.calls[-1] == ("cancel", ["9_1"])
    assert tender.workers_cancelled == 1


@pytest.mark.parametrize(("state", "fresh", "back"), [
    (JobState.PENDING, True, True),     # its node crashed, Slurm requeued the job
    (JobState.NODE_FAIL, True, True),
    (JobState.RUNNING, True, False),    # alive: its lease's timeout decides
    (JobState.PENDING, False, False),   # an older poll's answer: not acted on
])
def test_a_lease_of_a_worker_whose_job_a_fresh_poll_sees_gone_goes_back(
        tmp_path: Path, state: JobState, fresh: bool, back: bool) -> None:
    """Worker 9_1 held trial 1's item and stopped renewing it (its node crashed) 20 s
    ago: well within lease_timeout_s (60 s), past a heartbeat (5 s). A fresh poll that
    sees its job requeued (PENDING) or ended hands the item back at this tick (issue 48:
    such a trial waited 56-74 s for the lease's expiry)."""
    import os
    import time

    from dethpc.common import worker_queue as queue
    w = pool_world(tmp_path)
    paths = queue.WorkerPoolPaths.of_run_dir(Path(w.experiment().run_dir))
    queue.enqueue(paths, queue.WorkItem(trial_id=1, seq=0, argv=["true"], env={},
                                        cwd=str(tmp_path), trial_dir=str(tmp_path / "t1")))
    lease = queue.claim(paths, queue.worker_id("9_1", 321, "n1"))
    assert lease is not None
    old = time.time() - 20
    os.utime(lease.path, (old, old))
    infos = {"9_0": JobInfo(ref="9_0", state=JobState.RUNNING),
             "9_1": JobInfo(ref="9_1", state=state)}
    worker_pools(w).tend(w.exp_id, infos, fresh=fresh)
    assert queue.pending(paths) == (["t1-s0.json"] if back else [])
    assert queue.active_leases(paths) == ([] if back else [lease.path.name])


def test_a_pools_surplus_is_cancelled_at_most_once_per_pool_poll_s(tmp_path: Path) -> None:
    """As a search winds down its live items fall tick by tick: a cancel of the surplus
    each tick (and the poll each cancel brings) was most of a 256-trial pool cell's RPCs
    and its peak rate (issue 48). The first cancel goes at once; another within
    ``pool_poll_s`` waits, neither cancelled nor counted as put off (which would make
    the next tick poll), and goes once ``pool_poll_s`` has passed."""
    w = pool_world(tmp_path)
    assert w.cluster.pool_poll_s == 10.0
    now = [100.0]
    tender = WorkerPoolTender(w.store, w.cluster, w.backend, python="python3", tag="t",
                              budget=None, files=None,  # type: ignore[arg-type]
                              monotonic=lambda: now[0])
    infos = {"9_0": JobInfo(ref="9_0", state=JobState.RUNNING),
             "9_1": JobInfo(ref="9_1", state=JobState.PENDING)}

    def cancels() -> int:
        return w.backend.names().count("cancel")
    tender.tend(w.exp_id, infos)
    assert cancels() == 1 and tender.workers_cancelled == 1
    now[0] += 5.0
    tender.tend(w.exp_id, infos)                 # the plan still wants one: too soon
    assert cancels() == 1 and (tender.cancels_put_off, tender.workers_cancelled) == (0, 1)
    now[0] += 5.0
    tender.tend(w.exp_id, infos)
    assert cancels() == 2 and tender.workers_cancelled == 2


def test_tending_a_pool_with_the_ticks_config_builds_no_row_objects(tmp_path: Path) -> None:
    """With the tick's ``Resolved``, a pool's tending reads columns: the experiment's kind,
    run directory and state, its worker arrays' refs and a count of its live items; no
    Experiment, Batch or Job object (issue 47 item 2); a worker array whose every task
    ended is still marked so."""
    from sqlalchemy import event

    from dethpc.control.resolved import Resolved
    from dethpc.store.models import Experiment, Job
    w = pool_world(tmp_path)
    resolved = Resolved.of(w.experiment(), w.cluster)
    infos = {"9_0": JobInfo(ref="9_0", state=JobState.RUNNING),
             "9_1": JobInfo(ref="9_1", state=JobState.RUNNING)}
    built: list[object] = []

    def on_load(target: object, _ctx: object) -> None:
        built.append(target)

    for model in (Experiment, Batch, Job):
        event.listen(model, "load", on_load)
    try:
        worker_pools(w).tend(w.exp_id, infos, resolved=resolved)
    finally:
        for model in (Experiment, Batch, Job):
            event.remove(model, "load", on_load)
    assert built == []
    ended = {r: JobInfo(ref=r, state=JobState.COMPLETED) for r in infos}
    worker_pools(w).tend(w.exp_id, ended, resolved=resolved)
    with w.store.session() as s:
        assert [b.state for b in s.exec(select(Batch).where(
            Batch.kind == BatchKind.WORKERS))] == [BatchState.ENDED]
