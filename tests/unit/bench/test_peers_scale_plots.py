"""bench/peers_scale/plots: the regret series (step values, the median over seeds with an
unvalidated seed as infinite regret, grouping by fault mode) and the SVGs drawn from the
dethpc smoke's curves (tests/unit/bench/data/peers_scale_smoke_trimmed.json)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from bench.peers_scale.plots import draw, grid_of, median_curve, out_paths, series, step_value

DATA = Path(__file__).parent / "data" / "peers_scale_smoke_trimmed.json"
CURVE = [(10.0, 0.5), (20.0, 0.2), (35.0, 0.05)]


@pytest.mark.parametrize(("t", "want"), [
    (0.0, None), (9.99, None), (10.0, 0.5), (19.0, 0.5), (20.0, 0.2), (100.0, 0.05)])
def test_step_value(t: float, want: float | None) -> None:
    assert step_value(CURVE, t) == want


@pytest.mark.parametrize(("curves", "t", "want"), [
    # three seeds: the median is the middle one's
    ([CURVE, [(5.0, 0.9)], [(15.0, 0.1)]], 20.0, 0.2),
    # two of three seeds have not validated: infinite median, not drawn
    ([CURVE, [(50.0, 0.9)], [(60.0, 0.1)]], 20.0, None),
    # one of three not yet: the median is the worse of the two that have
    ([CURVE, [(5.0, 0.9)], [(60.0, 0.1)]], 12.0, 0.9),
    ([CURVE, [(5.0, 0.9)], [(60.0, 0.1)]], 60.0, 0.1),
    ([], 10.0, None),
])
def test_median_curve(curves: list[Any], t: float, want: float | None) -> None:
    assert median_curve(curves, [t]) == [want]


def test_grid_holds_every_point_up_to_the_end() -> None:
    g = grid_of([CURVE], 30.0, n=3)
    assert g == [0.0, 10.0, 20.0, 30.0]
    assert 35.0 not in g


def test_series_by_fault_mode_dethpc_first() -> None:
    doc = json.loads(DATA.read_text())
    doc["runs"].append({"cell": "optuna", "system": "optuna", "faults": False,
                        "metrics": {"seed": 0}, "regret_curve": [[1.0, 0.3]]})
    doc["runs"].append({"cell": "dethpc-pool", "system": "dethpc-pool", "faults": False,
                        "metrics": {"seed": 1}, "regret_curve": []})
    s = series(doc)
    assert set(s) == {False, True}
    assert list(s[False]) == ["dethpc-per-job", "dethpc-pool", "optuna"]
    assert len(s[False]["dethpc-pool"]) == 2 and s[False]["dethpc-pool"][1] == []
    assert list(s[True]) == ["dethpc-per-job", "dethpc-pool"]


def test_out_paths_beside_the_json() -> None:
    got = out_paths(Path("bench/results/peers_scale.json"))
    assert got == {False: Path("bench/results/peers_scale_regret.svg"),
                   True: Path("bench/results/peers_scale_regret_faults.svg")}


def test_draw_writes_an_svg_per_fault_mode(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    src = tmp_path / "peers_scale.json"
    src.write_text(DATA.read_text())
    written = draw(json.loads(DATA.read_text()), src)
    assert written == [tmp_path / "peers_scale_regret.svg",
                       tmp_path / "peers_scale_regret_faults.svg"]
    for path in written:
        text = path.read_text()
        ET.fromstring(text)                              # well-formed
        for system in ("dethpc-pool", "dethpc-per-job"):
            assert f"{system} (median of 1)" in text
        assert "target" in text and "SMOKE" in text
