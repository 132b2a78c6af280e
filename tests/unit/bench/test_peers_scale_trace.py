"""bench/peers_scale/trace: the seeded background trace of other users' jobs is
deterministic, fits the nodes, and keeps about the asked share of the GPUs busy."""

from __future__ import annotations

import statistics
from dataclasses import asdict

import pytest

from bench.peers_scale.trace import TraceSpec, background_trace, offered_load
from dethpc.devcluster.profiles import BACKGROUND_USERS


def _mean_load(seed: int, spec: TraceSpec) -> float:
    jobs = background_trace(seed, spec)
    return statistics.mean(offered_load(jobs, t) for t in range(0, int(spec.horizon_s), 30))


def test_a_seed_is_one_trace() -> None:
    assert background_trace(3) == background_trace(3)
    assert background_trace(3) != background_trace(4)


def test_every_job_is_well_formed() -> None:
    spec = TraceSpec()
    for seed in range(5):
        jobs = background_trace(seed, spec)
        assert [j.submit_s for j in jobs] == sorted(j.submit_s for j in jobs)
        for job in jobs:
            assert 0 <= job.submit_s < spec.horizon_s
            assert job.gpus in {g for g, _ in spec.sizes} and job.gpus <= spec.gpus_per_node
            assert 1.0 <= job.duration_s <= spec.max_duration_s
            assert job.user in BACKGROUND_USERS
        assert {j.user for j in jobs} == set(BACKGROUND_USERS)


@pytest.mark.parametrize(("busy", "gpus"), [(0.5, 64), (0.25, 64), (0.5, 128)])
def test_about_the_asked_share_of_the_gpus_is_busy(busy: float, gpus: int) -> None:
    spec = TraceSpec(total_gpus=gpus, busy_fraction=busy)
    target = busy * gpus
    # already busy when the benchmark begins, never more than one job past the target
    start = offered_load(background_trace(0, spec), 0.0)
    assert target <= start < target + max(g for g, _ in spec.sizes)
    means = [_mean_load(seed, spec) for seed in range(12)]
    assert all(0.6 * target < m < 1.4 * target for m in means), means
    assert 0.9 * target < statistics.mean(means) < 1.1 * target


def test_an_idle_site_has_no_background() -> None:
    assert background_trace(0, TraceSpec(busy_fraction=0.0)) == []


@pytest.mark.parametrize("kw", [{"busy_fraction": 1.0}, {"sizes": ((8, 1.0),)},
                                {"min_duration_s": 0.0}, {"users": ()}])
def test_a_trace_that_cannot_be_is_refused(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        TraceSpec(**{**asdict(TraceSpec()), **kw})  # type: ignore[arg-type]
