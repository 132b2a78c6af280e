"""bench/peers_scale/run: what a cell cut at its timeout counts (its work log up to the
cell's end, not what the trials wrote while everything was being stopped)."""

from __future__ import annotations

from typing import Any

from bench.peers_scale import metrics as mx
from bench.peers_scale.run import until
from bench.peers_scale.worklog import count_work


def _rec(event: str, wall: float, step: int = 0, **kw: Any) -> dict[str, Any]:
    return {"trial": "a", "run": "r1", "event": event, "step": step, "wall": wall, **kw}


def test_a_trial_stopped_by_the_teardown_is_unfinished_not_lost() -> None:
    """A running trial at the 100 s timeout; the teardown's signal makes it save and end
    ``preempted`` at 103 s. Counted up to the cell's end it is in progress there."""
    records = [_rec("start", 0.0), _rec("ready", 10.0),
               *[_rec("step", 10.0 + i, i, seconds=1.0) for i in range(1, 90)],
               _rec("save", 102.0, 89, ckpt="c1"), _rec("end", 103.0, 89, reason="preempted")]
    ended = 100.0
    for recs, lost in ((records, 1), (until(records, ended), 0)):
        work = count_work(recs)
        unfinished = mx.in_progress(recs, ended, 20.0)
        assert work.trials_lost - len(unfinished) == lost
