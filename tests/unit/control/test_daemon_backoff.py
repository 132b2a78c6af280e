"""The daemon's sleeps between ticks, and the back-off the benchmarks wait out."""

from __future__ import annotations

import pytest

from dethpc.control.daemon import backoff_s, next_delay


@pytest.mark.parametrize(("delay", "busy", "expected"), [
    (0.5, True, 0.5), (8.0, True, 0.5), (0.5, False, 1.0), (8.0, False, 10.0),
    (10.0, False, 10.0),
])
def test_next_delay(delay: float, busy: bool, expected: float) -> None:
    assert next_delay(delay, busy, 0.5, 10.0) == expected


@pytest.mark.parametrize(("tick_min", "tick_max", "expected"), [
    (0.5, 10.0, 15.0), (0.5, 20.0, 31.0), (10.0, 10.0, 0.0), (1.0, 3.0, 2.0),
])
def test_backoff_s(tick_min: float, tick_max: float, expected: float) -> None:
    assert backoff_s(tick_min, tick_max) == pytest.approx(expected)
