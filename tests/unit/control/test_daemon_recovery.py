"""The recover phase on its own (``dethpc.control.daemon.recovery``): which job, if any,
a batch left SUBMITTING by a crash is (a table), what adopting or failing it writes, and
the retry of cancels that did not go through. Real SQLite, a recording backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import select

from dethpc.backends.base import JobInfo, JobState
from dethpc.common.errors import CommandError
from dethpc.control.daemon.cancel import Canceller
from dethpc.control.daemon.recovery import Recovery
from dethpc.control.daemon.shared import Scope, TickStats
from dethpc.control.submission import Found, found_job
from dethpc.control.worker_pool_tend import WorkerPoolTender
from dethpc.store.models import Batch, BatchState, Job
from tests.unit.control.daemon_kit import CountingGuard, World, world


def info(ref: str, name: str) -> JobInfo:
    return JobInfo(ref=ref, state=JobState.PENDING, name=name)


@pytest.mark.parametrize(("found", "expected"), [
    ([], None),
    ([info("7_0", "other")], None),
    ([info("7_0", "b1"), info("7_1", "b1")], Found("7", True)),       # an array's tasks
    ([info("7", "b1")], Found("7", False)),                           # one job
    ([info("7+0", "b1"), info("7+1", "b1")], Found("7", False)),      # het components
    ([info("8_0", "other"), info("9_3", "b1")], Found("9", True)),
])
def test_found_job(found: list[JobInfo], expected: Found | None) -> None:
    assert found_job("b1", found) == expected


@pytest.mark.parametrize(("found", "size", "refs"), [
    (Found("7", True), 3, ["7_0", "7_1", "7_2"]), (Found("7", False), 1, ["7"]),
])
def test_an_adopted_jobs_refs(found: Found, size: int, refs: list[str]) -> None:
    assert found.refs(size) == refs


def recovery(w: World) -> tuple[Recovery, CountingGuard]:
    guard = CountingGuard()
    pools = WorkerPoolTender(w.store, w.cluster, w.backend, python="python3", tag="t",
                       budget=None, files=None)  # type: ignore[arg-type]
    canceller = Canceller(w.store, w.backend, pools, guard)
    return Recovery(w.store, w.backend, Scope(), guard, canceller,
                    runs_root=w.cluster.runs_root), guard


def submitting_batch(w: World, trials: int, name: str = "b1") -> int:
    """A batch recorded with its job rows whose sbatch was never confirmed."""
    return w.add_batch(w.add_trials(trials, needs_job=False), name=name)


def batch_and_jobs(w: World, batch_id: int) -> tuple[Batch, list[Job]]:
    with w.store.session() as s:
        batch = s.get(Batch, batch_id)
        assert batch is not None
        return batch, list(s.exec(select(Job).where(Job.batch_id == batch_id)
                                  .order_by(Job.array_index)))  # type: ignore[arg-type]


def test_a_batch_found_by_name_is_adopted(tmp_path: Path) -> None:
    w = world(tmp_path)
    batch_id = submitting_batch(w, 2)
    w.backend.found = [info("55_0", "b1"), info("55_1", "b1")]
    rec, _ = recovery(w)
    stats = TickStats()
    rec.adopt(stats)
    batch, jobs = batch_and_jobs(w, batch_id)
    assert (batch.state, batch.array_job_id) == (BatchState.SUBMITTED, "55")
    assert [j.ref for j in jobs] == ["55_0", "55_1"] and all(j.live for j in jobs)
    assert w.events("adopted") == [f"adopted job 55 of batch {batch_id} after restart"]
    assert stats.changed and w.backend.calls == [("find", ["b1"])]


def test_a_batch_not_found_is_failed_and_its_trials_need_a_job_again(tmp_path: Path) -> None:
    w = world(tmp_path)
    batch_id = submitting_batch(w, 2)
    rec, _ = recovery(w)
    rec.adopt(TickStats())
    batch, jobs = batch_and_jobs(w, batch_id)
    assert batch.state == BatchState.FAILED
    assert jobs == []            # never reached Slurm: no job (as after a refusal)
    assert [t.needs_job for t in w.trials()] == [True, True]


def test_nothing_submitting_asks_the_backend_nothing(tmp_path: Path) -> None:
    w = world(tmp_path)
    stats = TickStats()
    recovery(w)[0].adopt(stats)
    assert w.backend.calls == [] and not stats.changed


def test_cancels_due_are_retried_in_one_call_and_cleared(tmp_path: Path) -> None:
    w = world(tmp_path)
    batch_id = submitting_batch(w, 3)
    with w.store.session() as s:
        for job in s.exec(select(Job).where(Job.batch_id == batch_id)):
            job.ref, job.cancel_due = f"9_{job.array_index}", job.array_index != 1
            s.add(job)
    rec, guard = recovery(w)
    stats = TickStats()
    rec.retry_cancels(stats)
    assert w.backend.calls == [("cancel", ["9_0", "9_2"])]
    assert stats.cancelled == 2 and guard.checks == 1
    assert not any(j.cancel_due for j in batch_and_jobs(w, batch_id)[1])
    rec.retry_cancels(stats)                     # nothing due: no call, no lease check
    assert len(w.backend.calls) == 1 and guard.checks == 1


def test_a_failed_retry_is_the_ticks_error_and_stays_due(tmp_path: Path) -> None:
    w = world(tmp_path)
    batch_id = submitting_batch(w, 1)
    with w.store.session() as s:
        (job,) = s.exec(select(Job).where(Job.batch_id == batch_id))
        job.ref, job.cancel_due = "9_0", True
        s.add(job)
    w.backend.cancel_error = CommandError(["scancel"], 1, "", "slurmctld away")
    rec, _ = recovery(w)
    stats = TickStats()
    rec.retry_cancels(stats)
    assert stats.errors and stats.errors[0].startswith("cancelling 1 closed job(s) again")
    assert stats.cancelled == 0 and batch_and_jobs(w, batch_id)[1][0].cancel_due
