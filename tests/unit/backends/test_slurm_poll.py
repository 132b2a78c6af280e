"""Pure pieces of ``dethpc.backends.slurm_poll``: the argv of the poll's and find's
queries, a ref's record (``pick``), sacct's "no accounting", and the refs' order.
``settle`` has its own tests in test_accounting_wait.py."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dethpc.backends.base import JobInfo, JobState
from dethpc.backends.slurm_parse import SACCT_FIELDS, SQUEUE_FIELDS
from dethpc.backends.slurm_poll import (
    accounting_disabled,
    find_sacct_argv,
    find_squeue_argv,
    pick,
    sacct_argv,
    squeue_argv,
)
from dethpc.common.runner import CommandResult, CommandRunner


@pytest.mark.parametrize(("bases", "user", "which"), [
    (["7", "9"], None, "--jobs=7,9"),
    (["7", "9"], "alice", "--user=alice"),       # the user's whole queue, same one RPC
    ([], "alice", "--user=alice"),
])
def test_squeue_argv(bases: list[str], user: str | None, which: str) -> None:
    assert squeue_argv(bases, user) == ["squeue", "-h", "-r", "--states=all", which,
                                        "-O", SQUEUE_FIELDS]


def test_squeue_argv_local() -> None:
    """``--local``: no federation query before the queue's (one RPC of three)."""
    assert squeue_argv([], "alice", local=True) == [
        "squeue", "--local", "-h", "-r", "--states=all", "--user=alice", "-O", SQUEUE_FIELDS]
    assert find_squeue_argv(["a"], "bob", local=True)[:2] == ["squeue", "--local"]


@pytest.mark.parametrize(("answer", "rc", "local"), [
    ("", 0, True),                                          # in no federation
    ("Federation: fed1\nSelf:       c1:10.0.0.1:6817 ID:1 FedState:ACTIVE\n", 0, False),
    ("", 1, False),                                         # no answer: plain squeue
])
def test_the_poll_asks_the_federation_once_and_squeue_local_when_in_none(
        answer: str, rc: int, local: bool) -> None:
    """Each squeue asked slurmctld for the federation first (FED_INFO, a third of the
    daemon's poll RPCs, issue 48): the site is asked once, and a cluster in no federation
    is polled with ``--local``; a federated one (or one that did not answer, asked again
    at the next poll) keeps the plain squeue, which lists its siblings' jobs too."""
    from dethpc.backends.slurm import SlurmBackend

    class Fed(Scripted):
        def run(self, argv: Sequence[str], **kw: object) -> CommandResult:  # type: ignore[override]
            if list(argv[:3]) == ["scontrol", "show", "federation"]:
                self.calls.append(tuple(argv))
                return CommandResult(tuple(argv), rc, answer, "")
            return super().run(argv, **kw)

    runner = Fed({"squeue": "7_0|RUNNING|0:0|0|None|n1|normal|a|w|c\n"})
    backend = SlurmBackend(runner, user="alice")
    backend.poll(["7_0"])
    backend.poll(["7_0"])
    squeues = [c for c in runner.calls if c[0] == "squeue"]
    feds = [c for c in runner.calls if c[:3] == ("scontrol", "show", "federation")]
    assert len(squeues) == 2 and all(("--local" in c) is local for c in squeues)
    assert len(feds) == (1 if rc == 0 else 2)


@pytest.mark.parametrize(("refs", "jobs"), [
    (["7_1", "7_2", "8", "7_1"], "--jobs=7,8"),
    (["11+0"], "--jobs=11"),
])
def test_sacct_argv(refs: list[str], jobs: str) -> None:
    assert sacct_argv(refs) == ["sacct", "-P", "-n", "-X", jobs, "-o", SACCT_FIELDS]


@pytest.mark.parametrize(("user", "tail"), [(None, []), ("", []), ("bob", ["--user=bob"])])
def test_find_argvs(user: str | None, tail: list[str]) -> None:
    assert find_squeue_argv(["a", "b"], user) == [
        "squeue", "-h", "-r", "--states=all", "--name=a,b", "-O", SQUEUE_FIELDS, *tail]
    assert find_sacct_argv(["a", "b"], user) == [
        "sacct", "-P", "-n", "-X", "--name=a,b", "--starttime=now-14days", "-o",
        SACCT_FIELDS, *tail]


def info(ref: str, state: JobState = JobState.RUNNING) -> JobInfo:
    return JobInfo(ref=ref, state=state)


TABLE = {"7_0": info("7_0"), "7": info("7", JobState.PENDING), "11+0": info("11+0"),
         "12": info("12", JobState.COMPLETED)}


@pytest.mark.parametrize(("ref", "expected"), [
    ("7_0", info("7_0")),                         # its own record
    ("7_5", info("7_5", JobState.PENDING)),       # the array's pending remainder
    ("11", info("11")),                           # a het job: its leader component
    ("12", info("12", JobState.COMPLETED)),
    ("12_3", info("12_3", JobState.COMPLETED)),
    ("13", None),
    ("13_1", None),
])
def test_pick(ref: str, expected: JobInfo | None) -> None:
    assert pick(TABLE, ref) == expected


@pytest.mark.parametrize(("stderr", "disabled"), [
    ("sacct: error: Slurm accounting storage is disabled\n", True),
    ("sacct: error: Problem talking to the database: Connection refused\n", False),
    ("", False),
])
def test_accounting_disabled(stderr: str, disabled: bool) -> None:
    assert accounting_disabled(stderr) is disabled




class Scripted(CommandRunner):
    """Answers each Slurm command from a table by program; remembers every argv."""

    def __init__(self, answers: dict[str, str]) -> None:
        super().__init__()
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], **_: object) -> CommandResult:  # type: ignore[override]
        self.calls.append(tuple(argv))
        return CommandResult(tuple(argv), 0, self.answers.get(argv[0], ""), "")


def test_a_cancelled_pending_task_reads_cancelled_while_sacct_names_it_or_not(
        monkeypatch) -> None:
    """A pending array task cancelled leaves squeue at once and gets no record of its
    own: sacct's record of the array's pending remainder (``7_[1-5]``) names it until
    slurmdbd catches up (read as PENDING, the pool's tender cancelled the same workers
    again every tick), then nothing does (read as missing, each poll also ran sdiag).
    A task this backend cancelled reads CANCELLED in both cases, with no sdiag; one it
    did not cancel is read as before (sacct's PENDING: a job squeue does not show, e.g.
    in a hidden partition; then missing: sdiag, and UNKNOWN)."""
    from dethpc.backends import slurm_poll
    from dethpc.backends.slurm import SlurmBackend

    now = [100.0]
    monkeypatch.setattr(slurm_poll.time, "monotonic", lambda: now[0])
    runner = Scripted({
        "squeue": "7_0|RUNNING|0:0|0|None|n1|normal|a|w|c\n"
                  "7_1|PENDING|0:0|0|Priority||normal|a|w|c\n"
                  "7_2|PENDING|0:0|0|Priority||normal|a|w|c\n",
        "sacct": "7_[1-5]|PENDING|0:0|None||w|c\n", "sdiag": "DBD Agent queue size: 0\n"})
    backend = SlurmBackend(runner, user="alice")
    refs = [f"7_{i}" for i in range(6)]

    def states() -> dict[str, JobState]:
        return {r: i.state for r, i in backend.poll(refs).items()}

    assert states() == {"7_0": JobState.RUNNING,
                        **{f"7_{i}": JobState.PENDING for i in range(1, 6)}}
    backend.cancel(["7_4", "7_3"])
    assert runner.calls[-1] == ("scancel", "7_[3-4]")     # one KILL_JOB RPC, not two
    seen = {"7_0": JobState.RUNNING, "7_1": JobState.PENDING, "7_2": JobState.PENDING,
            "7_3": JobState.CANCELLED, "7_4": JobState.CANCELLED}
    assert states() == {**seen, "7_5": JobState.PENDING}   # 7_5: not ours to call gone
    runner.answers["sacct"] = ""                           # no record of them at all
    now[0] += 3600
    del runner.calls[:]
    assert states() == {**seen, "7_5": JobState.UNKNOWN}
    assert [c[0] for c in runner.calls] == ["squeue", "sacct", "sdiag"]  # 7_5's sdiag
    backend.cancel(["7_5"])
    del runner.calls[:]
    assert states() == {**seen, "7_5": JobState.CANCELLED}
    assert [c[0] for c in runner.calls] == ["squeue", "sacct"]           # no sdiag
