"""The ASHA benchmark's mode accounting (bench/asha/run.py), on hand-made curves.

Curves: loss fixed per curve, one simulated second of training per batch, free
validations, one worker, so every start cost adds up serially and the expected end
times can be computed by hand: per-job pays queue wait + job start for every job,
pool pays them once per worker and a warm start per item, a Continue pays a restore.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dethpc.config.model import AshaVariant, IntHP, Length, SearcherConfig, Unit
from dethpc.searchers.factory import make_searcher

RUN_PY = Path(__file__).resolve().parents[2] / "bench" / "asha" / "run.py"


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
