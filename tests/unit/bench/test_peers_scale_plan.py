"""bench/peers_scale/plan: a run's expected wall time from a measured run's cells (issue 48
item 6: the whole table in 150 minutes, a quick run in 20), and run.py refusing a run
over its budget before it touches the cluster."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.peers_scale import plan as P
from bench.peers_scale import run as R

REPO = Path(__file__).resolve().parents[3]


def _run(system: str, faults: bool, wall: float | None) -> dict[str, Any]:
    return {"system": system, "faults": faults,
            "metrics": {"finished": wall is not None, "wall_s": wall}}


REF = P.reference_from_runs(
    [_run("fast", True, 240.0), _run("slow", True, None), _run("fast", False, 200.0)],
    {"time_scale": 0.25, "timeout": 480.0},
    [{"system": "s", "faults": False, "wall_s": w} for w in (30.0, 50.0, 200.0)])
NO_COSTS = P.Costs(setup_s=0.0, teardown_s=0.0, teardown_by_system={}, small_cell_s=0.0)


def _regime(**kw: Any) -> P.Regime:
    base: dict[str, Any] = {"systems": ["fast", "slow"], "seeds": [0], "modes": [True],
                            "timeout_s": 300.0, "plain_timeout_s": 100.0, "time_scale": 0.25}
    return P.Regime(**{**base, **kw})


def test_a_cell_lasts_until_decided_or_its_timeout() -> None:
    p = P.plan(_regime(), REF, NO_COSTS)
    assert [(c.cell, c.search_s, c.reaches_timeout) for c in p.cells] == [
        ("fast+faults", 240.0, False), ("slow+faults", 300.0, True)]
    assert p.total_s == 540.0


def test_only_the_steps_scale_with_the_time_scale() -> None:
    # 240 s at 0.25; at 0.125 the steps' share (STEP_SHARE) halves
    got = P.decided_s(REF, "fast", True, 0.125)
    assert got == pytest.approx(240.0 * (1 - P.STEP_SHARE / 2))


def test_plain_cells_use_their_own_timeout_and_reference() -> None:
    p = P.plan(_regime(modes=[False]), REF, NO_COSTS)
    # fast has a plain reference (200 s), cut at 100; slow has none: its fault cell's
    # (undecided) stands in, so it runs to the timeout
    assert [(c.cell, c.search_s) for c in p.cells] == [("fast", 100.0), ("slow", 100.0)]


def test_costs_are_added_per_cell_and_the_small_cell_is_capped() -> None:
    costs = P.Costs(setup_s=5.0, teardown_s=10.0, teardown_by_system={"slow": 30.0},
                    small_cell_s=10.0)
    p = P.plan(_regime(small_seeds=5, small_modes=[False], small_systems=["s"],
                       small_timeout_s=60.0), REF, costs)
    assert p.total_s == (240 + 15) + (300 + 35) + 5 * (min(50.0, 60.0) + 10)
    assert p.small_cells == 5


def test_a_small_system_without_a_reference_is_refused() -> None:
    with pytest.raises(ValueError, match="measure one seed"):
        P.plan(_regime(small_seeds=1, small_modes=[True], small_systems=["s"]), REF)


def test_the_verdict_leaves_the_margin() -> None:
    many = _regime(seeds=list(range(30)))          # 30 x 555 s: well over 140 minutes
    assert not P.plan(many, REF, NO_COSTS).fits
    assert P.plan(_regime(), REF, NO_COSTS).fits
    quick = _regime(quick=True, seeds=list(range(2)))   # 1,080 s of a quick 19 minutes
    assert quick.budget_s - quick.margin_s == 19 * 60
    assert P.plan(quick, REF, NO_COSTS).fits
    assert not P.plan(_regime(quick=True, seeds=list(range(3))), REF, NO_COSTS).fits


def test_the_defaults_fit_their_budgets() -> None:
    """The full run's and --quick's defaults, planned from the committed reference runs
    (peers_scale_quick.json, peers.json), fit the issue's 150 and 20 minutes."""
    for argv in ([], ["--quick"]):
        args = _args(argv)
        p = R.expected(args)
        assert p.fits, p.text()
    full = R.expected(_args([]))
    assert len(full.cells) == 42 and full.small_cells == 30


def _args(argv: list[str]) -> Any:
    """run.py's arguments, parsed as main parses them (main exits after --plan)."""
    seen: dict[str, Any] = {}

    def fake_expected(args: Any) -> P.Plan:
        seen["args"] = args
        raise SystemExit(0)
    orig = R.expected
    R.expected = fake_expected      # type: ignore[assignment]
    old_argv = sys.argv
    sys.argv = ["run.py", *argv]
    try:
        with pytest.raises(SystemExit):
            R.main()
    finally:
        R.expected = orig           # type: ignore[assignment]
        sys.argv = old_argv
    return seen["args"]


def test_plan_prints_and_refuses_over_budget(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["run.py", "--plan"])
    assert R.main() == 0
    out = capsys.readouterr().out
    assert out.startswith("plan: 42 scale cells") and json.loads(out.split("\n", 1)[1])["fits"]
    # five seeds of everything, no shortened cells: refused before the root check and lock
    monkeypatch.setattr(sys, "argv", ["run.py", "--seeds", "0", "1", "2", "3", "4",
                                      "--timeout", "480"])
    monkeypatch.setattr(R, "hold_cluster", lambda: pytest.fail("took the lock"))
    with pytest.raises(SystemExit, match="exceeds its budget"):
        R.main()
