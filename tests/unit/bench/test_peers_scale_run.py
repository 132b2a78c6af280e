"""bench/peers_scale/run: what a cell cut at its timeout counts (its work log up to the
cell's end, not what the trials wrote while everything was being stopped)."""

from __future__ import annotations

from typing import Any

from bench.peers_scale import metrics as mx
from bench.peers_scale.run import unfinished_at, until
from bench.peers_scale.worklog import count_work


def _rec(event: str, wall: float, step: int = 0, **kw: Any) -> dict[str, Any]:
    return {"trial": "a", "run": "r1", "event": event, "step": step, "wall": wall, **kw}


def test_a_trial_stopped_by_the_teardown_is_unfinished_not_lost() -> None:
    """A running trial at the 100 s timeout; the teardown's signal makes it save and end
    ``preempted`` at 103 s. Counted up to the cell's end it is in progress there; counted
    with the teardown's records it ended ``preempted``, to resume: unfinished either way
    (metrics.trial_fates), where the older count called it lost."""
    records = [_rec("start", 0.0), _rec("ready", 10.0),
               *[_rec("step", 10.0 + i, i, seconds=1.0) for i in range(1, 90)],
               _rec("save", 102.0, 89, ckpt="c1"), _rec("end", 103.0, 89, reason="preempted")]
    ended = 100.0
    for recs, undecided in ((records, 1), (until(records, ended), 1)):
        work = count_work(recs)
        assert work.trials_undecided == undecided
        fates = mx.trial_fates(work.trials, finished=False,
                               in_progress=mx.in_progress(recs, ended, 20.0))
        assert fates == {"a": mx.Fate.UNFINISHED}
    # the search ended without deciding it: lost
    assert mx.trial_fates(count_work(records).trials, finished=True,
                          in_progress=set()) == {"a": mx.Fate.LOST}


def test_the_small_cell_runs_in_the_same_invocation(tmp_path: Any, monkeypatch: Any) -> None:
    """Item 7: bench/peers' search, one invocation per fault mode, on the 4-node dev
    cluster (SLURM_CONF left out), its docs kept under ``small`` with each one's wall."""
    import argparse
    import json

    from bench.peers_scale import run
    calls: list[tuple[list[str], dict[str, str]]] = []

    class Done:
        returncode = 0

    def fake_run(argv: list[str], env: dict[str, str], **_kw: Any) -> Done:
        calls.append((argv, env))
        out = argv[argv.index("--out") + 1]
        with open(out, "w") as f:
            json.dump({"faults": "--faults" in argv}, f)
        return Done()
    monkeypatch.setattr(run.subprocess, "run", fake_run)
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm-scale/slurm.conf")
    args = argparse.Namespace(small_seeds=5, small_timeout=60.0, small_faults="both")
    got = run.run_small(args, tmp_path)
    assert [c[0][c[0].index("--seeds") + 1] for c in calls] == ["5", "5"]
    assert all("SLURM_CONF" not in env for _argv, env in calls)
    first = calls[0][0]
    assert first[1].endswith("bench/peers/run.py") and "--faults" not in first
    assert first[first.index("--systems") + 1:first.index("--timeout-s")] == list(
        run.SMALL_SYSTEMS)
    assert first[first.index("--timeout-s") + 1] == "60"
    assert got["plain"] == {"faults": False} and got["faults"] == {"faults": True}
    assert got["plain_rc"] == 0 and "faults_wall_s" in got


def test_a_trial_in_its_start_up_at_the_end_is_unfinished() -> None:
    """It sleeps its 10 s start-up without a record; the slowest step is 3 s."""
    records = [_rec("start", 90.5)]
    assert mx.in_progress(records, 100.0, 3.0 + 5.0) == set()     # the step's window
    assert unfinished_at(records, 100.0, 3.0, 10.0) == {"a"}
