"""The ASHA benchmark's mode accounting (bench/asha/run.py), on hand-made curves.

Curves: loss fixed per curve, one simulated second of training per batch, free
validations, one worker, so every start cost adds up serially and the expected end
times can be computed by hand: per-job pays queue wait + job start for every job,
pool pays them once per worker and a warm start per item, a Continue pays a restore.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dethpc.config.model import AshaVariant, IntHP, Length, SearcherConfig, Unit
from dethpc.searchers.factory import make_searcher

RUN_PY = Path(__file__).resolve().parents[3] / "bench" / "asha" / "run.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("asha_bench_run", RUN_PY)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["asha_bench_run"] = mod
    spec.loader.exec_module(mod)
    return mod


run = _load()


def _curves(n: int, length: int) -> list[object]:
    lengths = list(range(1, length + 1))
    return [run.Curve(lengths, [1.0 + k] * length, [float(x) for x in lengths], 0.0)
            for k in range(n)]


def _sim(name: str, mode: str, costs: object, trials: int, length: int,
         workers: int = 1) -> object:
    extra: dict[str, object] = {}
    if name != "random":
        extra = {"variant": AshaVariant(name), "mode": "standard", "divisor": 4,
                 "max_rungs": 3}
    config = SearcherConfig(name="random" if name == "random" else "adaptive_asha",
                            metric="validation_loss",
                            max_length=Length(Unit.BATCHES, length), max_trials=trials,
                            max_concurrent_trials=workers, **extra)  # type: ignore[arg-type]
    curves = _curves(trials, length)
    sim = run.Sim(make_searcher(config, {"curve": IntHP(0, trials - 1)}, 0), curves,
                  workers, costs, 0, mode=mode)
    sim.run()
    return sim


COSTS = run.Costs(job_start_s=5.0, warm_start_s=0.5, restore_s=0.25, queue_wait_s=30.0)


@pytest.mark.parametrize(("mode", "end", "util"), [
    # two trials of 2 s each, one after the other
    ("per-job", 2 * (30 + 5 + 2), 1.0),          # every job: queue wait + start
    ("pool", (30 + 5) + 2 * (0.5 + 2), 1.0),     # once per worker, then a fork per trial
])
def test_random_search_pays_starts_per_job_or_once_per_worker(
        mode: str, end: float, util: float) -> None:
    sim = _sim("random", mode, COSTS, trials=2, length=2)
    assert sim.jobs == 2  # type: ignore[attr-defined]
    assert sim.end == pytest.approx(end)  # type: ignore[attr-defined]
    assert sim.utilisation() == pytest.approx(util)  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["per-job", "pool"])
@pytest.mark.parametrize("wait", [0.0, 30.0, 300.0])
def test_promotions_pay_a_restore_and_in_per_job_mode_a_new_job(mode: str,
                                                                  wait: float) -> None:
    costs = run.Costs(job_start_s=5.0, warm_start_s=0.5, restore_s=0.25, queue_wait_s=wait)
    sim = _sim("promotion", mode, costs, trials=8, length=16)
    jobs, units = sim.jobs, sim.units  # type: ignore[attr-defined]
    continues = jobs - 8
    assert continues > 0                               # the promotion variant promoted
    if mode == "per-job":
        expected = jobs * (wait + 5.0) + continues * 0.25 + units
    else:
        expected = (wait + 5.0) + jobs * 0.5 + continues * 0.25 + units
    assert sim.end == pytest.approx(expected)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("held", "ready", "last", "util"), [
    ([(0.0, 10.0), (0.0, 10.0)], 0.0, 10.0, 1.0),
    ([(0.0, 10.0), (0.0, 5.0)], 0.0, 10.0, 0.75),       # one worker idles half the time
    ([(0.0, 10.0), (0.0, 10.0)], 5.0, 10.0, 1.0),       # before the workers are up: not counted
    ([(0.0, 20.0), (0.0, 4.0)], 0.0, 8.0, 0.75),        # the drain after the last hand-out neither
    ([(0.0, 1.0)], 0.0, 0.0, None),                     # no window
])
def test_utilisation_counts_held_time_while_the_searcher_has_work(
        held: list[tuple[float, float]], ready: float, last: float,
        util: float | None) -> None:
    sim = _sim("random", "pool", COSTS, trials=1, length=2, workers=2)
    sim.held, sim.ready, sim.last_dispatch = held, ready, last  # type: ignore[attr-defined]
    assert sim.utilisation() == (None if util is None else pytest.approx(util))  # type: ignore[attr-defined]


def test_unknown_mode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="mode: 'batch' is not one of per-job, pool"):
        _sim("random", "batch", COSTS, trials=1, length=2)


@pytest.mark.parametrize(("cores", "end"), [
    (float("inf"), 5.0 + 2),      # each start on its own cores
    (2.0, 5.0 + 2),               # two starts, two cores: no sharing
    (1.0, 10.0 + 2),              # two starts share one core: both up at 10 s
    (0.5, 20.0 + 2),
])
def test_simultaneous_job_starts_share_the_start_cores(cores: float, end: float) -> None:
    costs = run.Costs(job_start_s=5.0, start_cores=cores)
    sim = _sim("random", "per-job", costs, trials=2, length=2, workers=2)
    assert sim.end == pytest.approx(end)  # type: ignore[attr-defined]


def test_a_start_alone_runs_at_full_speed_after_the_others_finish() -> None:
    # three trials, two slots, one core: trials 1 and 2 start together (up at 10 s,
    # run 2 s); trial 3 starts at 12 s alone: up at 17 s, done at 19 s
    costs = run.Costs(job_start_s=5.0, start_cores=1.0)
    sim = _sim("random", "per-job", costs, trials=3, length=2, workers=2)
    assert sim.end == pytest.approx(19.0)  # type: ignore[attr-defined]


def test_the_queue_wait_comes_before_the_shared_start() -> None:
    # one core, start 4 s, queue wait 1 s: two jobs wait 1 s, then share the core
    # (each 0.5 s of start per second): both up at 1 + 8 s, done 2 s later
    costs = run.Costs(job_start_s=4.0, start_cores=1.0, queue_wait_s=1.0)
    sim = _sim("random", "per-job", costs, trials=2, length=2, workers=2)
    assert sim.end == pytest.approx(1.0 + 8.0 + 2)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("cores", "ready"), [(float("inf"), 5.0), (4.0, 5.0), (2.0, 10.0),
                                              (1.0, 20.0)])
def test_pool_workers_starting_together_share_the_start_cores(cores: float,
                                                              ready: float) -> None:
    costs = run.Costs(job_start_s=5.0, start_cores=cores)
    sim = _sim("random", "pool", costs, trials=1, length=2, workers=4)
    assert sim.ready == pytest.approx(ready)  # type: ignore[attr-defined]
    assert sim.end == pytest.approx(ready + 2)  # type: ignore[attr-defined]


def test_start_cores_must_be_positive() -> None:
    with pytest.raises(ValueError, match="start_cores: 0.0 must be > 0"):
        _sim("random", "per-job", run.Costs(job_start_s=1.0, start_cores=0.0), trials=1,
             length=2)


@pytest.mark.parametrize("mode", ["per-job", "pool"])
def test_the_first_submission_delays_the_whole_search(mode: str) -> None:
    late = _sim("random", mode, run.Costs(job_start_s=5.0, submit_s=3.0), trials=2, length=2)
    now = _sim("random", mode, run.Costs(job_start_s=5.0), trials=2, length=2)
    assert late.end == pytest.approx(now.end + 3.0)  # type: ignore[attr-defined]
    assert late.ready == pytest.approx(now.ready + 3.0)  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["per-job", "pool"])
def test_the_next_trial_waits_for_the_searcher_to_hear_of_the_exit(mode: str) -> None:
    # one worker, one trial at a time, two trials of 2 s: the searcher creates the second
    # only 1.5 s after the first one's last validation, and ends 1.5 s after the second's
    costs = run.Costs(job_start_s=5.0, release_s=1.5)
    held = _sim("random", mode, costs, trials=2, length=2)
    free = _sim("random", mode, run.Costs(job_start_s=5.0), trials=2, length=2)
    assert held.end == pytest.approx(free.end + 3.0)  # type: ignore[attr-defined]
    assert held.jobs == free.jobs == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize(("mode", "end"), [
    # two trials handed out at once, one worker, 2 s each, release 1.5 s
    ("per-job", 2 * (5.0 + 2 + 1.5)),     # the second job waits for the daemon
    ("pool", 5.0 + 2 + 2 + 1.5),          # the worker claims the queued one at once
])
def test_a_pool_worker_claims_a_queued_item_without_waiting_for_the_release(
        mode: str, end: float) -> None:
    config = SearcherConfig(name="random", metric="validation_loss",
                            max_length=Length(Unit.BATCHES, 2), max_trials=2,
                            max_concurrent_trials=2)
    sim = run.Sim(make_searcher(config, {"curve": IntHP(0, 1)}, 0), _curves(2, 2), 1,
                  run.Costs(job_start_s=5.0, release_s=1.5), 0, mode=mode)
    sim.run()
    assert sim.end == pytest.approx(end)


def test_a_stop_frees_its_slot_after_the_release_and_drops_later_validations() -> None:
    costs = run.Costs(job_start_s=0.0, release_s=0.5)
    sim = _sim("stopping", "pool", costs, trials=8, length=16)
    free = _sim("stopping", "pool", run.Costs(job_start_s=0.0), trials=8, length=16)
    # the same decisions (the same units trained), later
    assert sim.units == free.units  # type: ignore[attr-defined]
    assert sim.end > free.end  # type: ignore[attr-defined]


def test_time_scale_stretches_the_recorded_seconds_only(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"meta": {"max_length": 2}, "curves": [
        {"lengths": [1, 2], "val_loss": [0.5, 0.25], "train_seconds": [1.0, 3.0],
         "val_seconds": 0.5}]}))
    _, (plain,) = run.load(path)
    _, (slow,) = run.load(path, 10.0)
    assert slow.loss == plain.loss == [0.5, 0.25]
    assert slow.train_s == [10.0, 30.0] and slow.val_s == 5.0
    with pytest.raises(ValueError, match="time_scale: 0.0 must be > 0"):
        run.load(path, 0.0)


@pytest.mark.parametrize(("mode", "order"), [
    ("per-job", [1, 2, 0]),   # the daemon submits in the order the searcher asked
    ("pool", [0, 1, 2]),      # a worker claims the oldest trial's item first
])
def test_a_pool_hands_out_the_oldest_trials_item_first(mode: str, order: list[int]) -> None:
    from dethpc.searchers.base import Continue, Create

    sim = run.Sim(make_searcher(SearcherConfig(
        name="random", metric="validation_loss", max_length=Length(Unit.BATCHES, 2),
        max_trials=3, max_concurrent_trials=3), {"curve": IntHP(0, 2)}, 0),
        _curves(3, 2), 1, run.Costs(job_start_s=0.0), 0, mode=mode)
    started: list[int] = []
    sim._start = lambda a: started.append(a.request_id)  # a free worker for every item
    sim._take([Create(0, {"curve": 0}, 1)])
    sim._dispatch()                       # trial 0 runs to its first rung
    # then two new trials are queued, and after them trial 0's promotion
    sim._take([Create(1, {"curve": 1}, 2), Create(2, {"curve": 2}, 2), Continue(0, 2)])
    sim._dispatch()
    assert started == [0, *order]
