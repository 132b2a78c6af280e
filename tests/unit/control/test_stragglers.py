"""Issue 35 item 4: the straggler rule (``dethpc.control.stragglers``), table-driven."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dethpc.control.stragglers import MIN_STEPS, RankTime, find_straggler, read_rank_times


def rt(rank: int, busy: float, *, run: int = 0, steps: int = 50, node: str = "",
       job: str = "7") -> RankTime:
    """A rank's report; a later run's (or job's) reports are newer."""
    return RankTime(rank=rank, node=node or f"n{rank // 2 + 1}", run=run, steps=steps,
                    busy_s=busy, step_s=1.0, at=100.0 + rank + 1000 * run + 10000 * int(job),
                    job=job)


@pytest.mark.parametrize(("times", "pct", "expected"), [
    # rank 3 at twice the median of 4 ranks: 100% behind
    ([rt(0, 0.1), rt(1, 0.1), rt(2, 0.1), rt(3, 0.2)], 20, (3, "n2", 100.0)),
    # within the threshold: none
    ([rt(0, 0.1), rt(1, 0.1), rt(2, 0.1), rt(3, 0.115)], 20, None),
    # just over it
    ([rt(0, 0.1), rt(1, 0.1), rt(2, 0.1), rt(3, 0.121)], 20, (3, "n2", 21.0)),
    # two ranks: the median is their mean; 0.3 vs 0.2 is 50% over
    ([rt(0, 0.1), rt(1, 0.3)], 20, (1, "n1", 50.0)),
    # the slowest of several slow ones; a tie goes to the lower rank
    ([rt(0, 0.1), rt(1, 0.3), rt(2, 0.3), rt(3, 0.1), rt(4, 0.1)], 20, (1, "n1", 200.0)),
    # off
    ([rt(0, 0.1), rt(1, 0.5)], 0, None),
    # one rank, or none
    ([rt(0, 0.1)], 20, None),
    ([], 20, None),
    # a median of 0 (nothing measured): none
    ([rt(0, 0.0), rt(1, 0.0), rt(2, 0.3)], 20, None),
    # a rank with too few steps is not compared yet
    ([rt(0, 0.1), rt(1, 0.1), rt(2, 0.5, steps=MIN_STEPS - 1)], 20, None),
    # only the latest run counts: run 0's straggler is gone in run 1
    ([rt(0, 0.1), rt(1, 0.5), rt(0, 0.1, run=1), rt(1, 0.1, run=1)], 20, None),
    ([rt(0, 0.1), rt(1, 0.1), rt(0, 0.1, run=1), rt(1, 0.4, run=1, node="n9")], 20,
     (1, "n9", 60.0)),
    # a trial restarted in a new job counts its runs from 0 again: the newest job counts
    ([rt(0, 0.1, run=2), rt(1, 0.5, run=2), rt(0, 0.1, job="8"), rt(1, 0.1, job="8")], 20,
     None),
    ([rt(0, 0.1, run=2), rt(1, 0.1, run=2), rt(0, 0.1, job="8"), rt(1, 0.3, job="8")], 20,
     (1, "n1", 50.0)),
])
def test_find_straggler(times: list[RankTime], pct: float,
                        expected: tuple[int, str, float] | None) -> None:
    found = find_straggler(times, pct)
    if expected is None:
        assert found is None
        return
    assert found is not None
    assert (found.rank, found.node, found.behind_pct) == expected
    assert str(found.rank) in found.describe() and found.node in found.describe()


def test_read_rank_times_skips_what_it_cannot_use(tmp_path: Path) -> None:
    assert read_rank_times(tmp_path / "missing") == []
    good = {"rank": 1, "world": 2, "node": "n2", "job": "12", "run": 0, "steps": 9,
            "busy_s": 0.2, "step_s": 0.3, "at": 5.0}
    (tmp_path / "1.json").write_text(json.dumps(good))
    (tmp_path / "0.json").write_text("{half")                        # torn or foreign
    (tmp_path / "2.json").write_text(json.dumps({**good, "rank": 2, "busy_s": None}))
    (tmp_path / "3.json").write_text(json.dumps(["not", "a", "record"]))
    (tmp_path / ".1.json.99.tmp").write_text(json.dumps(good))       # being replaced
    assert read_rank_times(tmp_path) == [RankTime(rank=1, node="n2", run=0, steps=9,
                                                  busy_s=0.2, step_s=0.3, at=5.0, job="12")]
