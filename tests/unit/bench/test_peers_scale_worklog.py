"""bench/peers_scale/worklog.count_work: useful, redone and lost steps of emulated trials,
table-driven on hand-written logs whose right answers are counted by hand."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from bench.peers_scale.worklog import WorkLog, count_thrown, count_work, read_log


def run(trial: str, name: str, steps: Iterable[int], *, load: str | None = None,
        saves: dict[int, str] | None = None, end: str | None = None,
        seconds: float = 1.0) -> list[dict[str, Any]]:
    """The records of one run: loads ``load``, executes ``steps`` (saving ``saves[step]``
    after that step), ends with ``end`` (None: killed)."""
    saves = saves or {}
    recs: list[dict[str, Any]] = [{"trial": trial, "run": name, "event": "start", "step": 0}]
    if load:
        recs.append({"trial": trial, "run": name, "event": "load", "ckpt": load, "step": -1})
    for s in steps:
        recs.append({"trial": trial, "run": name, "event": "step", "step": s,
                     "seconds": seconds})
        if s in saves:
            recs.append({"trial": trial, "run": name, "event": "save", "step": s,
                         "ckpt": saves[s]})
    if end:
        recs.append({"trial": trial, "run": name, "event": "end", "reason": end})
    return recs


R = range
# (case, records, (executed, useful, redone, lost, decided))
CASES = [
    ("clean", run("t", "a", R(1, 5), end="completed"), (4, 4, 0, 0, True)),
    ("stopped by the searcher", run("t", "a", R(1, 3), end="stopped"), (2, 2, 0, 0, True)),
    ("crash after a checkpoint",
     run("t", "a", R(1, 4), saves={2: "c"}) + run("t", "b", R(3, 5), load="c", end="completed"),
     (5, 4, 1, 0, True)),
    ("crash with no checkpoint: all again",
     run("t", "a", R(1, 4)) + run("t", "b", R(1, 5), end="completed"), (7, 4, 3, 0, True)),
    ("clean preemption: nothing redone",
     run("t", "a", R(1, 4), saves={3: "c"}, end="preempted")
     + run("t", "b", R(4, 5), load="c", end="completed"), (4, 4, 0, 0, True)),
    ("never resumed: a lost trial", run("t", "a", R(1, 4), saves={2: "c"}),
     (3, 0, 0, 3, False)),
    ("preempted, never resumed: lost too", run("t", "a", R(1, 4), saves={3: "c"},
                                               end="preempted"), (3, 0, 0, 3, False)),
    ("resumed from an older checkpoint",
     run("t", "a", R(1, 6), saves={2: "c1", 4: "c2"})
     + run("t", "b", R(3, 7), load="c1", end="completed"), (9, 6, 3, 0, True)),
    ("two crashes in a row",
     run("t", "a", R(1, 4), saves={2: "c"}) + run("t", "b", R(3, 6), load="c", saves={4: "d"})
     + run("t", "c", R(5, 7), load="d", end="completed"), (8, 6, 2, 0, True)),
    ("an earlier run went further than the decision: lost past it",
     run("t", "a", R(1, 6), saves={2: "c"}) + run("t", "b", R(3, 4), load="c", end="stopped"),
     (6, 3, 1, 2, True)),
    ("a failed last run is not decided",
     run("t", "a", R(1, 3), end="failed"), (2, 0, 0, 2, False)),
]


@pytest.mark.parametrize(("records", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_count_work(records: list[dict[str, Any]],
                    expected: tuple[int, int, int, int, bool]) -> None:
    (work,) = count_work(records).trials
    assert (work.executed, work.useful, work.redone, work.lost, work.decided) == expected
    assert work.executed == work.useful + work.redone + work.lost


def test_seconds_and_totals_over_trials() -> None:
    records = (run("x", "a", R(1, 4), saves={1: "c"}, seconds=2.0)
               + run("y", "p", R(1, 3), seconds=5.0)
               + run("x", "b", R(2, 5), load="c", end="completed", seconds=2.0))
    report = count_work(records)
    x, y = report.trials
    assert (x.trial, x.runs, x.redone, x.redone_s, x.executed_s) == ("x", 2, 2, 4.0, 12.0)
    assert (y.trial, y.decided, y.lost_s) == ("y", False, 10.0)
    assert report.trials_undecided == 1
    assert report.total("redone_s") == 4.0 and report.total("lost") == 2


@pytest.mark.parametrize("records", [
    run("t", "b", R(3, 5), load="nowhere", end="completed"),
    run("t", "a", R(1, 2)) + [{"trial": "t", "run": "a", "event": "load", "ckpt": "c",
                               "step": 1}],
], ids=["unknown checkpoint", "load after a step"])
def test_a_log_that_cannot_be_whole_is_refused(records: list[dict[str, Any]]) -> None:
    with pytest.raises(ValueError, match="trial t"):
        count_work(records)


def test_the_log_round_trips_and_skips_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "work.jsonl"
    log = WorkLog(path)
    for rec in run("t", "a", R(1, 3), end="completed"):
        log.write(rec)
    with path.open("a") as fh:
        fh.write('{"trial": "t", "run": "a", "ev')  # a writer killed mid-line
    records = read_log(path)
    assert len(records) == 4 and count_work(records).trials[0].useful == 2


def test_a_trial_the_system_decided_keeps_its_killed_last_run() -> None:
    """Pool trial 216 (the smoke after e62bde8): stopped by the searcher on its rung-1
    validation, then killed by a node crash in its checkpoint save: no end record. The
    log alone loses all 3 steps; with the system's decision they are its useful work."""
    records = run("216", "a", R(1, 4), end=None)
    (alone,) = count_work(records).trials
    (told,) = count_work(records, decided={"216"}).trials
    assert (alone.decided, alone.useful, alone.lost, alone.last_end) == (False, 0, 3, None)
    assert (told.decided, told.useful, told.lost, told.decided_elsewhere) == (True, 3, 0, True)
    (done,) = count_work(run("216", "a", R(1, 4), end="stopped"), decided={"216"}).trials
    assert done.decided and not done.decided_elsewhere


# (case, records, in_progress, decided, [(trial, cut runs, never resumed, steps)])
THROWN = [
    ("clean: nothing thrown", run("t", "a", R(1, 5), end="completed"), set(), set(), []),
    ("crash after a checkpoint, resumed: the steps past it",
     run("t", "a", R(1, 4), saves={2: "c"}) + run("t", "b", R(3, 5), load="c", end="completed"),
     set(), set(), [("t", 1, 0, 1)]),
    ("crash, never resumed: redone shows 0, thrown does not",
     run("t", "a", R(1, 6), saves={2: "c"}), set(), set(), [("t", 1, 1, 3)]),
    ("crash with no checkpoint: every step",
     run("t", "a", R(1, 4)) + run("t", "b", R(1, 5), end="completed"), set(), set(),
     [("t", 1, 0, 3)]),
    ("a resumed run killed before its first save",
     run("t", "a", R(1, 4), saves={3: "c"}) + run("t", "b", R(4, 6), load="c"), set(), set(),
     [("t", 2, 1, 2)]),
    ("clean preemption: nothing",
     run("t", "a", R(1, 4), saves={3: "c"}, end="preempted"), set(), set(), []),
    ("failed past its checkpoint", run("t", "a", R(1, 5), saves={2: "c"}, end="failed"),
     set(), set(), [("t", 1, 1, 2)]),
    ("still running at the cut: not thrown", run("t", "a", R(1, 6), saves={2: "c"}),
     {"t"}, set(), []),
    ("killed, resumed, the new run still running: the killed one counts",
     run("t", "a", R(1, 4), saves={2: "c"}) + run("t", "b", R(3, 4), load="c"), {"t"}, set(),
     [("t", 1, 0, 1)]),
    ("killed in its save after the searcher's stop: decided, not thrown",
     run("t", "a", R(1, 5), saves={2: "c"}), set(), {"t"}, []),
]


@pytest.mark.parametrize(("records", "in_progress", "decided", "expected"),
                         [c[1:] for c in THROWN], ids=[c[0] for c in THROWN])
def test_count_thrown(records: list[dict[str, Any]], in_progress: set[str],
                      decided: set[str], expected: list[tuple[str, int, int, int]]) -> None:
    got = count_thrown(records, in_progress, decided)
    assert [(t.trial, t.cut_runs, t.never_resumed, t.steps) for t in got] == expected
    assert all(t.seconds == t.steps for t in got)      # 1 s a step in these logs
