"""``dethpc.control.hangs``: when a running trial without progress is hung."""

from __future__ import annotations

import pytest

from dethpc.config.model import Watchdog
from dethpc.control.hangs import AUTO_FLOOR_S, RunWatch, allowance, judge, observe

T0 = 1000.0


def watched(*marks: float, gap: float = 0.0) -> RunWatch:
    w = RunWatch(0, running_since=T0, longest_gap=gap)
    for m in marks:
        w = observe(w, m)
    return w


def test_observe_keeps_the_newest_mark_and_the_longest_gap() -> None:
    w = watched(T0 + 5, T0 + 15, T0 + 18)
    assert (w.last_mark, w.longest_gap) == (T0 + 18, 10)
    assert observe(w, T0 + 17) == w                      # older: nothing
    assert observe(w, T0 + 18) == w                      # the same mark again: nothing
    assert observe(RunWatch(0, T0), T0 - 50).last_mark is None   # from an earlier run


@pytest.mark.parametrize(("policy", "watch", "cap", "allowed"), [
    (Watchdog(max_idle_s=0), watched(T0 + 1), 0.0, None),                 # off
    (Watchdog(max_idle_s=30), watched(T0 + 1), 0.0, 30),                  # explicit
    (Watchdog(max_idle_s=30, startup_s=1800), watched(), 0.0, 1800),       # no mark yet
    (Watchdog(max_idle_s=3600, startup_s=60), watched(), 0.0, 3600),       # at least max_idle
    (Watchdog(), watched(T0 + 10, T0 + 20), 0.0, AUTO_FLOOR_S),           # auto: floor
    (Watchdog(), watched(T0 + 100, T0 + 400), 0.0, 3000),                 # auto: 10 x 300 s
    (Watchdog(), watched(T0 + 1, gap=360), 0.0, 3600),                     # an earlier run's gap
    (Watchdog(), watched(T0 + 100, T0 + 400), 1200.0, 1200),              # the site's cap
    (Watchdog(), watched(), 900.0, 900),                                   # cap on startup too
], ids=["off", "explicit", "startup", "startup-at-least-max-idle", "auto-floor", "auto-gaps",
        "auto-earlier-gap", "cap", "cap-startup"])
def test_allowance(policy: Watchdog, watch: RunWatch, cap: float, allowed: float | None) -> None:
    assert allowance(policy, watch, cap) == allowed


@pytest.mark.parametrize(("watch", "now", "hung"), [
    (watched(T0 + 10), T0 + 40, False),        # 30 s idle: exactly allowed
    (watched(T0 + 10), T0 + 40.5, True),
    (watched(), T0 + 100, False),              # starting: startup_s (100 s) allowed
    (watched(), T0 + 101, True),
])
def test_judge(watch: RunWatch, now: float, hung: bool) -> None:
    policy = Watchdog(max_idle_s=30, startup_s=100)
    found = judge(policy, watch, now)
    assert (found is not None) is hung
    if found is not None:
        assert found.started is (watch.last_mark is not None)
        assert found.idle_s == now - (watch.last_mark or watch.running_since)
