"""``dethpc.control.bad_nodes``: which nodes an experiment leaves out, and the option."""

from __future__ import annotations

import pytest

from dethpc.common.exitcodes import ExitReason as R
from dethpc.config.model import BadNodes
from dethpc.control.bad_nodes import BadNode, NodeRun, exclude_option, judge

NOW = 10_000.0


def run(node: str, reason: R, at: float, trial: int = 1) -> NodeRun:
    return NodeRun(node, reason, at, trial, f"{int(at)}_0")


@pytest.mark.parametrize(("runs", "policy", "bad"), [
    ([], BadNodes(2, 3600), []),
    # two failures in a row on n1: excluded; one on n2: not
    ([run("n1", R.ERROR, 1), run("n1", R.ERROR, 2, 2), run("n2", R.ERROR, 3)],
     BadNodes(2, 1e9), ["n1"]),
    # a completed run between the failures clears the node
    ([run("n1", R.ERROR, 1), run("n1", R.COMPLETED, 2), run("n1", R.ERROR, 3)],
     BadNodes(2, 1e9), []),
    # preemption, requeue, cancel and node failure say nothing: still in a row
    ([run("n1", R.ERROR, 1), run("n1", R.PREEMPTED, 2), run("n1", R.CANCELLED, 3),
      run("n1", R.NODE_FAIL, 4), run("n1", R.REQUEUED, 5), run("n1", R.ERROR, 6)],
     BadNodes(2, 1e9), ["n1"]),
    # a time limit or a searcher's stop ran the code: cleared
    ([run("n1", R.ERROR, 1), run("n1", R.TIME_LIMIT, 2), run("n1", R.ERROR, 3)],
     BadNodes(2, 1e9), []),
    ([run("n1", R.ERROR, 1), run("n1", R.STOPPED, 2), run("n1", R.ERROR, 3)],
     BadNodes(2, 1e9), []),
    # the last failure older than the window: the node is given another chance
    ([run("n1", R.ERROR, NOW - 100), run("n1", R.ERROR, NOW - 50)], BadNodes(2, 49), []),
    ([run("n1", R.ERROR, NOW - 100), run("n1", R.ERROR, NOW - 50)], BadNodes(2, 50), ["n1"]),
    # order is by time, not by input
    ([run("n1", R.ERROR, 3), run("n1", R.COMPLETED, 1), run("n1", R.ERROR, 2)],
     BadNodes(2, 1e9), ["n1"]),
    # off
    ([run("n1", R.ERROR, 1), run("n1", R.ERROR, 2)], BadNodes(0, 1e9), []),
    # the default: three
    ([run("n1", R.ERROR, NOW - 2), run("n1", R.ERROR, NOW - 1)], BadNodes(), []),
    ([run("n1", R.ERROR, NOW - 3), run("n1", R.ERROR, NOW - 2), run("n1", R.ERROR, NOW - 1)],
     BadNodes(), ["n1"]),
], ids=["none", "two-in-a-row", "cleared-by-completion", "neutral-ends-skipped",
        "cleared-by-time-limit", "cleared-by-stop", "outside-window", "inside-window",
        "time-order", "off", "default-two", "default-three"])
def test_judge(runs: list[NodeRun], policy: BadNodes, bad: list[str]) -> None:
    found = judge(runs, policy, NOW)
    assert [b.node for b in found] == bad
    for b in found:  # the evidence: the failures in a row, oldest first
        assert all(r.reason is R.ERROR for r in b.evidence)
        assert [r.at for r in b.evidence] == sorted(r.at for r in b.evidence)


def bad(*nodes: str) -> list[BadNode]:
    return [BadNode(n, (run(n, R.ERROR, 1),)) for n in nodes]


@pytest.mark.parametrize(("nodes", "pool_args", "exp_args", "option"), [
    ((), (), (), None),
    (("n1",), (), (), "--exclude=n1"),
    # the pool's and the experiment's --exclude are kept (the option replaces them)
    (("n1",), ("--exclude=n4", "--mail-type=FAIL"), (), "--exclude=n4,n1"),
    (("n1", "n2"), ("--exclude=n4",), ("-x n[5-6]",), "--exclude=n[5-6],n1,n2"),
    (("n1",), ("--exclude=n4",), ("!--exclude",), "--exclude=n1"),
    (("n1",), ("-x", ), ("--exclude=n1,n3",), "--exclude=n1,n3"),
])
def test_exclude_option(nodes: tuple[str, ...], pool_args: tuple[str, ...],
                        exp_args: tuple[str, ...], option: str | None) -> None:
    assert exclude_option(bad(*nodes), pool_args, exp_args) == option


def test_a_bad_node_says_what_did_it() -> None:
    (b,) = judge([run("n3", R.ERROR, 1, trial=4), run("n3", R.ERROR, 2, trial=5)],
                 BadNodes(2, 1e9), NOW)
    assert b.summary() == "n3: 2 failed runs in a row (trial 4 job 1_0, trial 5 job 2_0)"
    assert b.last_at == 2
