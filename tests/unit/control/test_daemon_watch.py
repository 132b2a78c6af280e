"""The watch between ticks on its own (``dethpc.control.daemon.watch.Watcher``): what it
watches (from the store), what ends a wait early, and that the fast path it is handed
gets exactly the metrics files that grew. Real SQLite and files; short real sleeps."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dethpc.backends.base import JobState
from dethpc.common.paths import ExperimentPaths
from dethpc.common.worker_queue import WorkerPoolPaths
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control.daemon.shared import Scope
from dethpc.control.daemon.watch import Acts, Watched, Watcher, grown_files
from dethpc.store.models import BatchState, IngestOffset
from tests.unit.control.daemon_kit import World, world


def fast_cluster(tmp_path: Path, poll_s: float = 0.02) -> ClusterConfig:
    return ClusterConfig(runs_root=tmp_path / "runs", metrics_poll_s=poll_s,
                         tick_min_s=0.05, pools={"default": ResourcePool(name="default")})


def running(w: World, n: int, *, state: JobState = JobState.RUNNING) -> list[int]:
    """``n`` trials with a live job in ``state``; their ids."""
    trials = w.add_trials(n, needs_job=False)
    w.add_batch(trials, batch_state=BatchState.SUBMITTED, ref="5_{i}", state=state)
    return [t.id for t in trials if t.id is not None]


def metrics(w: World, trial_id: int) -> Path:
    return ExperimentPaths(Path(w.experiment().run_dir)).trial(trial_id).metrics


def test_refresh_watches_the_running_jobs_from_the_ingested_offset(tmp_path: Path) -> None:
    w = world(tmp_path, cluster=fast_cluster(tmp_path))
    ids = running(w, 2)
    running(w, 1, state=JobState.PENDING)                   # writes nothing: not watched
    with w.store.session() as s:
        s.add(IngestOffset(trial_id=ids[0], file="metrics.jsonl", offset=42))
    watcher = Watcher(w.store, w.cluster, Scope(), None)
    watcher.refresh()
    assert watcher.watch == {ids[0]: Watched(w.exp_id, metrics(w, ids[0]), 42),
                             ids[1]: Watched(w.exp_id, metrics(w, ids[1]), 0)}
    other = Watcher(w.store, w.cluster, Scope("somebody-else"), None)
    other.refresh()
    assert other.watch == {}


def test_the_fast_path_gets_the_grown_files_and_a_change_ends_the_wait(tmp_path: Path) -> None:
    w = world(tmp_path, cluster=fast_cluster(tmp_path))
    ids = running(w, 2)
    watcher = Watcher(w.store, w.cluster, Scope(), None)
    seen: list[dict[int, set[int]]] = []
    calls = 0

    def stop() -> bool:
        nonlocal calls
        calls += 1
        if calls == 2:
            path = metrics(w, ids[1])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text('{"kind": "validation", "steps": 1, "metrics": {}}\n')
        return False

    def fast(grown: dict[int, set[int]]) -> bool:
        seen.append(grown)
        return True

    t0 = time.monotonic()
    assert watcher.wait(30.0, stop, fast) is True
    assert time.monotonic() - t0 < 10.0, "a change must bring the next tick forward"
    assert seen == [{w.exp_id: {ids[1]}}]


def validated(tmp_path: Path, *, poll_s: float) -> tuple[World, int]:
    """A world with one running trial whose metrics file holds a validation; its id."""
    w = world(tmp_path, cluster=fast_cluster(tmp_path, poll_s=poll_s))
    trial_id = running(w, 1)[0]
    path = metrics(w, trial_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"kind": "validation", "steps": 1, "metrics": {}}\n')
    return w, trial_id


def test_a_file_grown_when_the_tick_is_due_within_a_stat_gets_no_fast_pass(
        tmp_path: Path) -> None:
    """The tick is due within ``metrics_poll_s`` when the grown file is seen: no fast
    pass, and the wait ends with a change (the tick reads the lines; a fast pass just
    before it reconciled the same lines twice, issue 47)."""
    w, _ = validated(tmp_path, poll_s=0.5)
    watcher = Watcher(w.store, w.cluster, Scope(), None)
    assert watcher.wait(0.6, lambda: False, never_called) is True


def test_a_file_grown_long_before_the_tick_gets_a_fast_pass(tmp_path: Path) -> None:
    w, trial_id = validated(tmp_path, poll_s=0.02)
    watcher = Watcher(w.store, w.cluster, Scope(), None)
    seen: list[dict[int, set[int]]] = []

    def fast(grown: dict[int, set[int]]) -> bool:
        seen.append(grown)
        return False

    assert watcher.wait(60.0, lambda: bool(seen), fast) is False
    assert seen == [{w.exp_id: {trial_id}}]


def test_nothing_grown_sleeps_the_whole_delay_and_calls_nothing(tmp_path: Path) -> None:
    w = world(tmp_path, cluster=fast_cluster(tmp_path))
    running(w, 1)
    watcher = Watcher(w.store, w.cluster, Scope(), None)
    t0 = time.monotonic()
    assert watcher.wait(0.3, lambda: False, never_called) is False
    assert time.monotonic() - t0 >= 0.3


def never_called(grown: object) -> bool:
    raise AssertionError(f"the fast path was called with {grown}")


def test_metrics_poll_zero_only_sleeps(tmp_path: Path) -> None:
    w = world(tmp_path, cluster=fast_cluster(tmp_path, poll_s=0))
    running(w, 1)
    watcher = Watcher(w.store, w.cluster, Scope(), None)
    assert watcher.wait(0.1, lambda: False, never_called) is False
    assert watcher.watch == {}                               # not even refreshed


def test_a_wake_since_the_tick_began_is_seen_once_marked(tmp_path: Path) -> None:
    w = world(tmp_path, cluster=fast_cluster(tmp_path))
    wake = tmp_path / "daemon.wake"
    watcher = Watcher(w.store, w.cluster, Scope(), wake)
    assert not watcher.woken()                               # absent, as when built
    wake.touch()
    assert watcher.woken()
    watcher.mark()                                           # a tick begins
    assert not watcher.woken()
    os.utime(wake, ns=(1, 1))
    assert watcher.woken()
    assert not Watcher(w.store, w.cluster, Scope(), None).woken()


def test_a_result_in_a_watched_pool_since_the_tick_began(tmp_path: Path) -> None:
    w = world(tmp_path, cluster=fast_cluster(tmp_path))
    running(w, 1)
    results = Path(w.experiment().run_dir) / "pool" / "results"
    results.mkdir(parents=True)
    watcher = Watcher(w.store, w.cluster, Scope(), None)
    watcher.refresh()                                        # first seen: marked now
    assert watcher.pool_dirs == [results] and not watcher.pool_changed()
    (results / "t1-s0.json").write_text("{}")
    os.utime(results, ns=(2, 2))
    assert watcher.pool_changed()
    watcher.mark()
    assert not watcher.pool_changed()


def test_a_worker_taking_a_run_is_seen_while_no_run_has_started(tmp_path: Path) -> None:
    """Only pending items: no metrics file is watched yet, but the pool's ``leases/``
    is; a worker's claim (a rename into it) brings the next tick forward, which then
    watches the started run (a backed-off daemon saw the first validations up to
    tick_max_s late before)."""
    w = world(tmp_path, cluster=fast_cluster(tmp_path))
    running(w, 1, state=JobState.PENDING)
    pool = Path(w.experiment().run_dir) / "pool"
    for d in ("results", "leases", "work"):
        (pool / d).mkdir(parents=True)
    (pool / "work" / "t1-s0.json").write_text("{}")
    watcher = Watcher(w.store, w.cluster, Scope(), None)
    watcher.refresh()
    assert watcher.watch == {}
    assert sorted(watcher.pool_dirs) == [pool / "leases", pool / "results"]
    assert not watcher.pool_changed()
    os.rename(pool / "work" / "t1-s0.json", pool / "leases" / "w1@t1-s0.json")
    os.utime(pool / "leases", ns=(3, 3))
    assert watcher.pool_changed()
    t0 = time.monotonic()
    assert watcher.wait(60.0, lambda: False, never_called) is True
    assert time.monotonic() - t0 < 30.0, "the wait slept its whole delay"


# --------------------------------------------------------------- which validations
def _line(kind: str, steps: int) -> str:
    return f'{{"kind": "{kind}", "steps": {steps}, "metrics": {{"loss": 1.0}}}}\n'


ACTS_CASES = [
    # (target, validate_at, run ends at target, seen, steps of the new validations,
    #  worth a pass after each)
    ("promotion rung, per-job: the target is reached", 32, "[32]", False, -1, [32], [True]),
    ("promotion rung in a pool: the run's end brings the tick", 32, "[32]", True, -1, [32],
     [False]),
    ("between the rungs: nothing to decide", 128, "[128]", False, 31, [64, 96, 128],
     [False, False, True]),
    ("pool run from 32 to 128: none of them", 128, [128], True, 31, [64, 96, 128, 160],
     [False, False, False, False]),
    ("stopping ASHA: each rung below the target once", 512, "[32, 128, 512]", True, -1,
     [32, 64, 128, 160, 512], [True, False, True, False, False]),
    ("one validation past two points", 512, "[32, 128, 512]", False, -1, [160, 192],
     [True, False]),
    ("a rung's validation after its training line was ingested", 128, "[32, 128]", False,
     127, [128], [True]),
    ("a repeated validation at a point already reached", 128, "[32, 128]", False, 32, [32],
     [False]),
    ("validate_at unreadable: the target still counts", 64, "not json", False, -1, [32, 64],
     [False, True]),
]


@pytest.mark.parametrize(("why", "target", "validate_at", "ends", "seen", "steps", "worth"),
                         ACTS_CASES, ids=[c[0] for c in ACTS_CASES])
def test_which_validations_can_move_the_searcher(why: str, target: int, validate_at: object,
                                                 ends: bool, seen: int, steps: list[int],
                                                 worth: list[bool]) -> None:
    acts = Acts(target, validate_at, ends, seen=seen)
    assert [acts.worth_a_pass(n) for n in steps] == worth, why


def test_a_validation_the_searcher_cannot_act_on_waits_for_the_tick(tmp_path: Path) -> None:
    """With the trial's points known (``Acts``), only a validation reaching one, an early
    exit, or a line the daemon cannot read is handed to the fast path."""
    f = tmp_path / "metrics.jsonl"
    f.write_text("")
    watch = {7: Watched(1, f, 0, acts=Acts(128, "[32, 128]", False, seen=31))}

    def append(text: str) -> dict[int, set[int]]:
        with f.open("a") as fh:
            fh.write(text)
        return grown_files(watch)

    assert append(_line("training", 32) + _line("validation", 32)) == {1: {7}}
    assert append(_line("training", 64) + _line("validation", 64)) == {}
    assert append(_line("validation", 96) + '{"kind": "checkpoint", "steps": 96, '
                  '"uuid": "u"}\n') == {}
    assert append('{"kind": "early_exit", "reason": "INVALID_HP"}\n') == {1: {7}}
    assert append('{"kind": "validation", "steps": "x"}\n') == {1: {7}}   # unreadable
    assert append(_line("validation", 128)) == {1: {7}}
    assert append(_line("validation", 160)) == {}       # past the target


def test_refresh_knows_each_running_trials_points_and_its_pool(tmp_path: Path) -> None:
    w = world(tmp_path, cluster=fast_cluster(tmp_path))
    per_job = w.add_trials(1, needs_job=False, target_length=128, validate_at=[32, 128],
                           steps_completed=40)
    untargeted = w.add_trials(1, needs_job=False)
    w.add_batch(per_job + untargeted, batch_state=BatchState.SUBMITTED, ref="5_{i}",
                state=JobState.RUNNING)
    watcher = Watcher(w.store, w.cluster, Scope(), None)
    watcher.refresh()
    acts = watcher.watch[per_job[0].id].acts   # type: ignore[index]
    assert acts is not None and not acts.run_ends_at_target
    assert (acts.points(), acts.seen) == ((32, 128), 39)
    assert watcher.watch[untargeted[0].id].acts is None   # type: ignore[index]
    # the same experiment run by a worker pool: its runs end at their target
    WorkerPoolPaths.of_run_dir(Path(w.experiment().run_dir)).results.mkdir(parents=True)
    watcher.refresh()
    acts = watcher.watch[per_job[0].id].acts   # type: ignore[index]
    assert acts is not None and acts.run_ends_at_target
