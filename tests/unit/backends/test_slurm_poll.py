"""Pure pieces of ``dethpc.backends.slurm_poll``: the argv of the poll's and find's
queries, a ref's record (``pick``), sacct's "no accounting", and the refs' order.
``settle`` has its own tests in test_accounting_wait.py."""

from __future__ import annotations

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


@pytest.mark.parametrize(("bases", "user", "which"), [
    (["7", "9"], None, "--jobs=7,9"),
    (["7", "9"], "alice", "--user=alice"),       # the user's whole queue, same one RPC
    ([], "alice", "--user=alice"),
])
def test_squeue_argv(bases: list[str], user: str | None, which: str) -> None:
    assert squeue_argv(bases, user) == ["squeue", "-h", "-r", "--states=all", which,
                                        "-O", SQUEUE_FIELDS]


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


