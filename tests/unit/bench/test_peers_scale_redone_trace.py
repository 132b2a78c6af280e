"""bench/peers_scale/redone_trace: each redone step put on its cause."""

from __future__ import annotations

from typing import Any

from bench.peers_scale.redone_trace import attribute, by_cause, resumed_to_stop
from bench.peers_scale.worklog import count_work

T0 = 1_000_000.0


class Log:
    """Records of one trial's runs, at walls in seconds after T0."""

    def __init__(self, trial: str = "t") -> None:
        self.trial = trial
        self.records: list[dict[str, Any]] = []

    def add(self, run: str, event: str, wall: float, step: int = 0, **kw: Any) -> Log:
        self.records.append({"trial": self.trial, "run": run, "event": event, "step": step,
                             "wall": T0 + wall, **kw})
        return self

    def steps(self, run: str, first: int, last: int, wall: float, every: int = 4,
              seconds: float = 0.5) -> float:
        """Steps ``first..last`` from ``wall`` on, a validation and a save (``<run>-<n>``)
        every ``every``; the wall after the last."""
        for n in range(first, last + 1):
            wall += seconds
            self.add(run, "step", wall, n, seconds=seconds)
            if n % every == 0:
                self.add(run, "validate", wall, n, loss=1.0)
                self.add(run, "save", wall, n, ckpt=f"{run}-{n}")
        return wall


def crash(node: str, at: float, **kw: Any) -> dict[str, Any]:
    return {"kind": "node_crash", "nodes": [node], "started_s": at, "took_s": 0.2, **kw}


def test_a_node_crash_on_the_runs_node_before_its_save() -> None:
    log = Log()
    log.add("a", "start", 0.0, container="40.0.g3")
    last = log.steps("a", 1, 6, 1.0)                  # saved at 4; 5-6 unsaved
    log.add("b", "start", 20.0, container="41.0.g5").add("b", "load", 21.0, 4, ckpt="a-4")
    log.steps("b", 5, 8, 21.0)
    log.add("b", "end", 30.0, reason="completed")
    outcomes = [crash("g5", last - 0.5),              # another node: not this run's
                crash("g3", last + 0.4)]
    [r] = attribute(log.records, outcomes, T0)
    assert (r.trial, r.run, r.node, r.steps, r.seconds) == ("t", "a", "g3", 2, 1.0)
    assert (r.cause, r.by, r.resumed_s) == ("node_crash", "node", 20.0)
    assert r.fault == f"node_crash g3 at {last + 0.4} s"
    assert sum(c["steps"] for c in by_cause([r]).values()) == \
        count_work(log.records).total("redone")


def test_resuming_from_an_older_checkpoint_is_the_systems() -> None:
    log = Log()
    log.add("a", "start", 0.0, container="40.0.g3")
    log.steps("a", 1, 8, 1.0)                          # saved at 4 and 8
    log.add("a", "end", 6.0, reason="preempted")
    log.add("b", "start", 7.0).add("b", "load", 7.5, 4, ckpt="a-4")    # not a-8
    log.steps("b", 5, 8, 8.0)
    log.add("b", "end", 11.0, reason="completed")
    [r] = attribute(log.records, [crash("g3", 5.0)], T0)
    assert (r.cause, r.steps, r.fault) == ("older_checkpoint", 4, "")


def test_a_clean_end_without_the_steps_saved_and_a_kill_nothing_explains() -> None:
    pre, kill = Log("p"), Log("k")
    pre.add("a", "start", 0.0)
    pre.steps("a", 1, 6, 1.0)
    pre.add("a", "end", 5.0, reason="preempted")       # left without saving 5-6
    pre.add("b", "start", 6.0).add("b", "load", 6.5, 4, ckpt="a-4")
    pre.steps("b", 5, 8, 7.0)
    pre.add("b", "end", 10.0, reason="stopped")
    kill.add("a", "start", 0.0, container="50.0.g2")
    kill.steps("a", 1, 3, 1.0)                        # no save: killed at 2.5 s
    kill.add("b", "start", 100.0)
    kill.steps("b", 1, 4, 100.0)
    kill.add("b", "end", 103.0, reason="stopped")
    outcomes = [crash("g7", 2.6),                       # another node
                crash("g2", 2.5 + 61.0)]                # this node, past MATCH_S
    got = {r.trial: r for r in attribute(pre.records + kill.records, outcomes, T0)}
    assert (got["p"].cause, got["p"].steps) == ("ended_preempted", 2)
    assert (got["k"].cause, got["k"].steps, got["k"].fault) == ("killed", 3, "")


def test_without_the_node_a_fault_is_matched_on_time_among_the_systems_exposures() -> None:
    log = Log()
    log.add("a", "start", 0.0)                          # an old log: no container key
    last = log.steps("a", 1, 2, 1.0)
    log.add("b", "start", 20.0)
    log.steps("b", 1, 4, 20.0)
    log.add("b", "end", 23.0, reason="stopped")
    others = crash("g1", last + 0.1, exposed=[{"job": "9", "user": "dethpc-bg1"}])
    ours = {"kind": "preempt", "nodes": ["g8", "g9"], "started_s": last + 1.0,
            "took_s": 30.0, "exposed": [{"job": "5_1", "user": "dethpc-bench"}]}
    [r] = attribute(log.records, [others, ours], T0)
    assert (r.cause, r.by, r.node) == ("preemption", "time", "")
    [r] = attribute(log.records, [{"kind": "kill_login", "nodes": [],
                                   "started_s": last + 2.0, "took_s": 0.0}], T0)
    assert (r.cause, r.by) == ("login_kill", "time")


def test_an_undecided_trial_has_no_redone_work() -> None:
    log = Log()
    log.add("a", "start", 0.0)
    log.steps("a", 1, 6, 1.0)
    log.add("b", "start", 10.0).add("b", "load", 10.5, 4, ckpt="a-4")
    log.steps("b", 5, 7, 11.0)                          # killed at the cell's end
    assert attribute(log.records, [], T0) == []


def test_a_run_that_resumed_only_to_be_stopped() -> None:
    log = Log()
    log.add("a", "start", 0.0)
    log.steps("a", 1, 4, 1.0)                           # the rung's validation and save
    log.add("a", "end", 4.0, reason="preempted")        # its stop came while it saved
    log.add("b", "start", 5.0).add("b", "load", 6.0, 4, ckpt="a-4")
    log.steps("b", 5, 5, 7.0, seconds=0.25)
    log.add("b", "end", 7.25, reason="stopped")
    assert attribute(log.records, [], T0) == []         # useful by the lineage
    assert resumed_to_stop(log.records) == {"runs": 1, "trials": ["t"], "steps": 1,
                                            "step_s": 0.25, "run_s": 2.25}
    # a resumed run that validates at its own rung before the stop is not one
    other = Log("o")
    other.add("a", "start", 0.0)
    other.steps("a", 1, 3, 1.0, every=3)
    other.add("a", "end", 3.0, reason="preempted")
    other.add("b", "start", 5.0).add("b", "load", 6.0, 3, ckpt="a-3")
    other.steps("b", 4, 4, 7.0)
    other.add("b", "end", 8.0, reason="stopped")
    assert resumed_to_stop(other.records)["runs"] == 0


def test_a_run_that_resumed_a_killed_trial_only_to_be_stopped() -> None:
    """A node crash killed the run while it saved its rung's checkpoint, after the
    searcher had the validation and stopped it; the resumed run sees the stop at once."""
    log = Log()
    log.add("a", "start", 0.0, container="40.0.g10")
    log.steps("a", 1, 12, 1.0)
    log.steps("a", 13, 16, 7.0, every=99)
    log.add("a", "validate", 9.0, 16, loss=1.0)         # the rung; killed in its save
    log.add("b", "start", 70.0).add("b", "load", 72.0, 12, ckpt="a-12")
    log.steps("b", 13, 13, 72.0, seconds=0.1)
    log.add("b", "end", 72.1, reason="stopped")
    [r] = attribute(log.records, [crash("g10", 9.5)], T0)
    assert (r.cause, r.steps, r.resumed_s) == ("node_crash", 1, 70.0)
    assert resumed_to_stop(log.records)["runs"] == 1
