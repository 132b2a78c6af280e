"""The submit phase on its own (``dethpc.control.daemon.submit``, ``.batches``,
``.throttles``): how trials are cut into arrays, how many het trials may go, what a
failure means, which throttles change (tables); one sbatch per array recorded before and
confirmed after; the per-experiment loop's waits and failures. Real SQLite, a recording
backend."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from sqlmodel import select

from dethpc.common.errors import CommandError, SubmitError
from dethpc.control.daemon.batches import BatchSubmitter, TrialFiles, batch_throttle
from dethpc.control.daemon.budget import SubmitBudget
from dethpc.control.daemon.pulls import ImageGate
from dethpc.control.daemon.shared import Scope, TickStats
from dethpc.control.daemon.submit import (
    Failure,
    SubmitPhase,
    Submitter,
    array_chunks,
    failure,
    het_room,
)
from dethpc.control.daemon.throttles import sync_throttles, throttle_changes, throttle_for
from dethpc.control.worker_pool_tend import WorkerPoolTender
from dethpc.jobs.render import make_env
from dethpc.store.models import Batch, BatchState, Experiment, ExperimentState, Job, Trial
from tests.unit.control.daemon_kit import CountingGuard, World, world

DOWN = "sbatch: error: Batch job submission failed: Unable to contact slurm controller"


@pytest.mark.parametrize(("n", "max_size", "chunks"), [
    (0, 5, []), (3, 5, [(0, 3)]), (5, 5, [(0, 5)]), (7, 3, [(0, 3), (3, 6), (6, 7)]),
    (2, 0, [(0, 1), (1, 2)]),     # a size below 1 counts as 1
])
def test_array_chunks(n: int, max_size: int, chunks: list[tuple[int, int]]) -> None:
    assert [(r.start, r.stop) for r in array_chunks(n, max_size)] == chunks


@pytest.mark.parametrize(("k", "live", "waiting", "room"), [
    (0, 5, 3, 3), (2, 0, 3, 2), (2, 1, 3, 1), (2, 2, 3, 0), (2, 5, 3, 0), (4, 0, 1, 1),
])
def test_het_room(k: int, live: int, waiting: int, room: int) -> None:
    assert het_room(k, live, waiting) == room


@pytest.mark.parametrize(("k", "size", "array", "throttle"), [
    (0, 5, True, 0), (2, 5, True, 2), (8, 5, True, 5), (2, 1, False, 0),
])
def test_batch_throttle(k: int, size: int, array: bool, throttle: int) -> None:
    assert batch_throttle(k, size, array) == throttle
    if array:
        assert throttle_for(k, size) == throttle


def test_failure() -> None:
    down = CommandError(["sbatch"], 1, "", DOWN)
    assert failure(down, Path("/r")) == Failure(
        str(down), warn=f"Slurm did not answer; the trials wait for the next tick ({down})")
    bad = SubmitError("no such partition")
    assert failure(bad, Path("/r")) == Failure(str(bad), fail=f"submission failed: {bad}")
    full = OSError(errno.ENOSPC, "No space left on device")
    message = ("cannot write the job scripts under /r: No space left on device "
               f"(errno {errno.ENOSPC}); the trials wait")
    assert failure(full, Path("/r")) == Failure(message, warn=message)


def batch(id: int, size: int, throttle: int, array_job_id: str | None = "9") -> Batch:
    return Batch(id=id, experiment_id=1, size=size, throttle=throttle,
                 array_job_id=array_job_id)


def test_throttle_changes() -> None:
    batches = [batch(1, 5, 4), batch(2, 5, 2), batch(3, 1, 4), batch(4, 5, 4, None),
               batch(5, 5, 4)]
    changes = throttle_changes(2, batches, live_batches={1, 2, 3, 4})
    assert [(b.id, want) for b, want in changes] == [(1, 2), (3, 1)]
    assert [(b.id, w) for b, w in throttle_changes(0, batches, {1})] == [(1, 0)]


class Parts:
    """The submit phase's collaborators, as the daemon builds them."""

    def __init__(self, w: World) -> None:
        self.guard = CountingGuard()
        self.budget = SubmitBudget(w.store, w.cluster, w.backend, Scope())
        self.budget.start_tick(None)
        jenv = make_env()
        files = TrialFiles(w.cluster, w.backend, python="python3", jenv=jenv)
        self.worker_pools = WorkerPoolTender(w.store, w.cluster, w.backend, python="python3",
                                             tag="t", budget=self.budget, files=files)
        gate = ImageGate(w.store, w.cluster, w.backend, python="python3", tag="t",
                         clock=lambda: 1.0, policy=self.budget)
        self.submitter = Submitter(w.store, w.backend, self.budget, BatchSubmitter(
            w.store, w.cluster, w.backend, self.budget, files, tag="t", jenv=jenv),
            gate, self.worker_pools)
        self.phase = SubmitPhase(w.store, w.backend, self.guard, self.submitter, self.worker_pools,
                                 runs_root=w.cluster.runs_root)


def batches(w: World) -> list[Batch]:
    with w.store.session() as s:
        return list(s.exec(select(Batch).order_by(Batch.id)))  # type: ignore[arg-type]


def test_trials_go_out_as_arrays_cut_at_the_max_array_size(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.add_trials(5)
    w.backend.array_max = 2
    assert Parts(w).submitter.experiment(w.exp_id) == 5
    assert w.backend.names() == ["max_array_size", "submit", "submit", "submit"]
    assert [len(r.array_indices) for r in w.backend.requests] == [2, 2, 1]
    assert [r.throttle for r in w.backend.requests] == [2, 2, 1]
    assert [(b.state, b.size, b.array_job_id) for b in batches(w)] == [
        (BatchState.SUBMITTED, 2, "101"), (BatchState.SUBMITTED, 2, "102"),
        (BatchState.SUBMITTED, 1, "103")]
    assert not any(t.needs_job for t in w.trials())
    with w.store.session() as s:
        assert sorted(j.ref or "" for j in s.exec(select(Job))) == [
            "101_0", "101_1", "102_0", "102_1", "103_0"]
    assert len(w.events("submitted")) == 3


def test_a_batch_is_recorded_before_sbatch_and_stays_submitting_if_it_fails(
        tmp_path: Path) -> None:
    w = world(tmp_path)
    w.add_trials(2)
    w.backend.submit_errors = [CommandError(["sbatch"], 1, "", DOWN)]
    with pytest.raises(CommandError):
        Parts(w).submitter.experiment(w.exp_id)
    (b,) = batches(w)
    assert b.state == BatchState.SUBMITTING and b.size == 2
    with w.store.session() as s:
        assert [j.ref for j in s.exec(select(Job))] == [None, None]


def test_heterogeneous_trials_go_one_sbatch_each_within_max_concurrent(
        tmp_path: Path) -> None:
    w = world(tmp_path, slurm_traits=True, slurm={"components": [
        {"name": "a", "entrypoint": "python3 a.py"},
        {"name": "b", "entrypoint": "python3 b.py"}]})
    w.add_trials(3)
    assert Parts(w).submitter.experiment(w.exp_id) == 2      # max_concurrent_trials 2
    assert [r.array_indices for r in w.backend.requests] == [(), ()]
    assert [t.needs_job for t in w.trials()] == [False, False, True]


def test_a_paused_experiment_gets_nothing(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.add_trials(2)
    with w.store.session() as s:
        exp = s.get(Experiment, w.exp_id)
        assert exp is not None
        exp.state = ExperimentState.PAUSED
        s.add(exp)
    assert Parts(w).submitter.experiment(w.exp_id) == 0
    assert w.backend.calls == []


def test_the_phase_checks_the_lease_per_experiment_and_counts_what_went_out(
        tmp_path: Path) -> None:
    w = world(tmp_path)
    w.add_trials(2)
    parts = Parts(w)
    stats = TickStats()
    parts.phase.run([w.exp_id], {}, stats)
    assert stats.submitted == 2 and stats.errors == [] and parts.guard.checks == 1


def test_slurm_not_answering_is_a_wait(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.add_trials(1)
    w.backend.submit_errors = [CommandError(["sbatch"], 1, "", DOWN)]
    stats = TickStats()
    Parts(w).phase.run([w.exp_id], {}, stats)
    assert len(stats.errors) == 1 and w.experiment().state == ExperimentState.ACTIVE
    assert w.events("warning")[0].startswith("Slurm did not answer")


REFUSED = "sbatch: unrecognized option '--thisisnotavalidslurmoption'"


def test_another_submit_error_fails_the_experiment(tmp_path: Path) -> None:
    """Refused before any job reached Slurm: ERROR at once, its trials too, in sbatch's
    words (Determined's experiment and trial end ERROR with them)."""
    w = world(tmp_path)
    w.add_trials(1)
    w.backend.submit_errors = [SubmitError(f"sbatch refused the job: {REFUSED}")]
    stats = TickStats()
    Parts(w).phase.run([w.exp_id], {}, stats)
    assert w.experiment().state == ExperimentState.ERROR
    assert REFUSED in w.experiment().message
    assert [(t.state, REFUSED in (t.exit_reason or "")) for t in w.trials()] == [
        ("ERROR", True)]
    assert w.events("error") == [f"submission failed: sbatch refused the job: {REFUSED}"]


def test_a_submit_error_after_jobs_ran_kills_them(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.add_trials(1)
    parts = Parts(w)
    parts.phase.run([w.exp_id], {}, TickStats())       # one job reached Slurm
    w.add_trials(1)
    w.backend.submit_errors = [SubmitError("no such partition")]
    parts.phase.run([w.exp_id], {}, TickStats())
    assert w.experiment().state == ExperimentState.STOPPING_KILLED
    assert w.events("error") == ["submission failed: no such partition"]


def test_a_config_error_of_one_experiment_does_not_stop_the_others(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.add_trials(1)
    with w.store.session() as s:
        exp = s.get(Experiment, w.exp_id)
        assert exp is not None
        exp.config_yaml = "searcher: {name: nope}"
        s.add(exp)
    stats = TickStats()
    Parts(w).phase.run([w.exp_id, 12345], {}, stats)
    assert stats.errors and "submission failed" in w.events("error")[0]


def test_a_throttle_follows_max_concurrent_trials_once(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.add_trials(4)
    Parts(w).submitter.experiment(w.exp_id)
    (b,) = batches(w)
    assert b.throttle == 2
    assert sync_throttles(w.store, w.backend, w.exp_id) == 0       # steady: no call
    from dethpc.control.experiments import set_concurrency

    set_concurrency(w.store, w.exp_id, 3)
    w.backend.calls.clear()
    assert sync_throttles(w.store, w.backend, w.exp_id) == 1
    assert w.backend.calls == [("set_throttle", ("101", 3))]
    assert w.events("throttle") == ["job 101: ArrayTaskThrottle 2 -> 3"]
    assert sync_throttles(w.store, w.backend, w.exp_id) == 0


def test_a_steady_throttle_check_is_one_read(tmp_path: Path) -> None:
    """With the tick's config, a tick that changes no throttle reads the store once (the
    arrays with live jobs, joined to the experiment's state and kind; issue 47 item 2),
    and an experiment that ended meanwhile has its arrays left alone."""
    from sqlalchemy import event

    from dethpc.control.experiments import set_concurrency
    from dethpc.control.reconcile import load_config

    w = world(tmp_path)
    w.add_trials(4)
    Parts(w).submitter.experiment(w.exp_id)
    with w.store.session() as s:
        exp = s.get(Experiment, w.exp_id)
        assert exp is not None
    statements: list[str] = []

    def on_execute(_conn, _cursor, statement, _params, _ctx, _many):  # type: ignore[no-untyped-def]
        statements.append(statement)

    event.listen(w.store.engine, "before_cursor_execute", on_execute)
    try:
        assert sync_throttles(w.store, w.backend, w.exp_id, load_config(exp)) == 0
    finally:
        event.remove(w.store.engine, "before_cursor_execute", on_execute)
    assert len(statements) == 1, statements
    set_concurrency(w.store, w.exp_id, 3)
    with w.store.session() as s:
        exp = s.get(Experiment, w.exp_id)
        assert exp is not None
        cfg = load_config(exp)
        exp.state = ExperimentState.COMPLETED
        s.add(exp)
    w.backend.calls.clear()
    assert sync_throttles(w.store, w.backend, w.exp_id, cfg) == 0
    assert w.backend.calls == []


def with_trials(tmp_path: Path, n: int) -> tuple[World, Parts, Experiment, list[Trial]]:
    """A world with ``n`` trials needing a job, its parts, and the experiment and trials
    as the submit phase reads them (detached rows, by id)."""
    w = world(tmp_path)
    w.add_trials(n)
    parts = Parts(w)
    with w.store.session() as s:
        exp = s.get(Experiment, w.exp_id)
        assert exp is not None
        trials = list(s.exec(select(Trial).where(Trial.experiment_id == w.exp_id)
                             .order_by(Trial.id)))  # type: ignore[arg-type]
    return w, parts, exp, trials


def test_pool_items_go_out_without_loading_their_trials_again(tmp_path: Path) -> None:
    """A batch of pool items takes its trials as the submit phase read them: their
    needs_job cleared by one UPDATE, no Trial loaded again in its transaction (issue 47
    item 2: reloading them was most of a pool batch's store work, bench/daemon_cost)."""
    from sqlalchemy import event

    from dethpc.common import worker_queue as queue
    from dethpc.control.reconcile import load_config
    from dethpc.store.models import Trial

    w, parts, exp, trials = with_trials(tmp_path, 3)
    loaded: list[object] = []

    def on_load(target: object, _ctx: object) -> None:
        loaded.append(target)

    event.listen(Trial, "load", on_load)
    try:
        assert parts.worker_pools.submit_items(exp, load_config(exp), trials) == 3
    finally:
        event.remove(Trial, "load", on_load)
    assert loaded == []
    assert not any(t.needs_job for t in w.trials())
    with w.store.session() as s:
        jobs = list(s.exec(select(Job).order_by(Job.id)))  # type: ignore[arg-type]
    assert [(j.trial_id, j.array_index) for j in jobs] == [(t.id, i) for i, t in enumerate(trials)]
    paths = queue.WorkerPoolPaths.of_run_dir(Path(exp.run_dir))
    assert all(queue.known(paths, queue.item_name(t.id or 0, 0)) for t in trials)
    assert len(w.events("submitted")) == 1


def test_a_pool_trial_gets_its_files_but_no_job_script(tmp_path: Path) -> None:
    """A pool item's trial has its hparams.json as a job's has, and no
    job.sbatch: no job runs it (the worker runs the item; docs/worker-pool.md), so the
    daemon does not render it (issue 47 item 2). A trial of a job batch still gets one."""
    from dethpc.common.paths import ExperimentPaths
    from dethpc.control.reconcile import load_config

    w, parts, exp, trials = with_trials(tmp_path, 2)
    assert parts.worker_pools.submit_items(exp, load_config(exp), trials[:1]) == 1
    paths = ExperimentPaths(Path(exp.run_dir))
    pooled = paths.trial(trials[0].id or 0)
    assert pooled.hparams.is_file()
    assert not pooled.job_script.exists()
    assert parts.submitter.batches.files.write(exp, load_config(exp), trials[1]).is_file()
