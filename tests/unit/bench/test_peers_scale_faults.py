"""bench/peers_scale/faults: the seeded fault schedule is one per seed, holds the issue's
faults (2 crashes revived after 120 s, 3 preemptions of 2 nodes for 180 s, one login
kill, one slurmctld restart), never hits a node twice at once, keeps injections apart,
and refuses plans that cannot fit; squeue parsing and exposure are exact."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.peers_scale.faults import (
    NO_FAULTS,
    FaultKind,
    FaultPlan,
    exposed,
    fault_schedule,
    parse_squeue,
    refused_count,
)

NODES = [f"g{i}" for i in range(1, 17)]


def test_a_seed_is_one_schedule_for_every_system() -> None:
    assert fault_schedule(1, NODES, 1800) == fault_schedule(1, NODES, 1800)
    assert fault_schedule(1, NODES, 1800) != fault_schedule(2, NODES, 1800)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("horizon", [900.0, 1800.0, 9000.0])
def test_the_issues_faults_in_the_window(seed: int, horizon: float) -> None:
    plan = FaultPlan()
    events = fault_schedule(seed, NODES, horizon, plan)
    kinds = Counter(e.kind for e in events)
    assert kinds == {FaultKind.CRASH: 2, FaultKind.REVIVE: 2, FaultKind.PREEMPT: 3,
                     FaultKind.KILL_LOGIN: 1, FaultKind.CTLD_RESTART: 1}
    assert [e.at_s for e in events] == sorted(e.at_s for e in events)
    for e in events:
        if e.kind is FaultKind.REVIVE:
            continue
        assert plan.window[0] * horizon <= e.at_s <= plan.window[1] * horizon
    crashes = [e for e in events if e.kind is FaultKind.CRASH]
    revives = [e for e in events if e.kind is FaultKind.REVIVE]
    assert sorted((c.at_s + 120.0, c.nodes) for c in crashes) == \
        sorted((r.at_s, r.nodes) for r in revives)
    for p in (e for e in events if e.kind is FaultKind.PREEMPT):
        assert len(set(p.nodes)) == 2 and p.hold_s == 180.0
    # injections (revivals included) at least min_gap apart
    times = sorted(e.at_s for e in events)
    assert all(b - a >= plan.min_gap_s - 1e-9 for a, b in zip(times, times[1:], strict=False))
    # no node under two faults at once
    held = [(e.at_s, e.at_s + e.hold_s, n) for e in events
            if e.kind in (FaultKind.CRASH, FaultKind.PREEMPT) for n in e.nodes]
    for i, (a0, a1, n) in enumerate(held):
        for b0, b1, m in held[i + 1:]:
            assert n != m or a1 < b0 or b1 < a0, (n, (a0, a1), (b0, b1))


@pytest.mark.parametrize(("plan", "nodes", "horizon", "error"), [
    (FaultPlan(), NODES, 100.0, "lengthen the horizon"),
    (FaultPlan(preempt_nodes=3, crashes=0), ["g1", "g2"], 3600.0, "nodes free to preempt"),
    (FaultPlan(), ["g1", "g1"], 3600.0, "distinct"),
    (FaultPlan(), [], 3600.0, "distinct"),
])
def test_plans_that_cannot_fit_are_refused(plan: FaultPlan, nodes: list[str],
                                           horizon: float, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        fault_schedule(0, nodes, horizon, plan)


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"crashes": -1}, "counts"), ({"preempt_nodes": 0}, "counts"),
    ({"window": (0.5, 0.4)}, "window"), ({"window": (0.0, 1.5)}, "window"),
    ({"crash_down_s": 0}, "crash_down_s"), ({"min_gap_s": -1}, "min_gap_s"),
])
def test_bad_plans(kwargs: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        FaultPlan(**kwargs)  # type: ignore[arg-type]


def test_no_faults_is_an_empty_schedule() -> None:
    assert fault_schedule(0, NODES, 10.0, NO_FAULTS) == []
    assert NO_FAULTS.injections == 0 and FaultPlan().injections == 7


def test_squeue_rows_and_exposure() -> None:
    text = ("11|dethpc-bench|RUNNING|g1|low|trial-1\n"
            "12_3|dethpc-bg1|RUNNING|g[2-3]|low|bg|with|bars\n"
            "13|dethpc-bench|PENDING||low|trial-2\n"
            "garbage line\n")
    rows = parse_squeue(text)
    assert [r["job"] for r in rows] == ["11", "12_3", "13"]
    assert rows[1]["name"] == "bg|with|bars"

    def expand(spec: str) -> list[str]:
        return {"g1": ["g1"], "g[2-3]": ["g2", "g3"], "": []}[spec]

    assert [r["job"] for r in exposed(rows, ["g3"], expand)] == ["12_3"]
    assert [r["job"] for r in exposed(rows, ["g1", "g2"], expand)] == ["11", "12_3"]
    assert exposed(rows, ["g9"], expand) == []


@pytest.mark.parametrize(("outcomes", "refused"), [
    ([], 0), ([{"refused": False}, {}], 0), ([{"refused": True}, {"refused": False}], 1)])
def test_refused_count(outcomes: list[dict[str, object]], refused: int) -> None:
    assert refused_count(outcomes) == refused
