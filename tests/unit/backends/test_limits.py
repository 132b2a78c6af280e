"""Per-user job limits, pure: sacctmgr parsing, which limits a pool falls under, how
Slurm counts the user's jobs against them, the headroom left, and which sbatch
refusals are "wait and retry"."""

from __future__ import annotations

import pytest

from dethpc.backends.base import UNLIMITED, JobInfo, JobState, Limit, PoolLimits
from dethpc.backends.limits import (
    at_submit_limit,
    cap_after_refusal,
    cap_after_success,
    counted,
    counted_live,
    headroom,
    limit_refusal,
    refusal_is_final,
)
from dethpc.backends.slurm_limits import (
    Assoc,
    QosLimits,
    UserAssocs,
    job_qos,
    parse_qos_limits,
    parse_user_assocs,
    pool_limits,
)

S = JobState

# what the dev cluster's sacctmgr printed (22.05), plus a partition-specific association
USER_OUT = """\
dethpc-user|ml-team|ml-team||limited|limited||
dethpc-user|ml-team|dethpc||normal,limited|||
dethpc-user|ml-team|dethpc|high|normal|normal|5|3
someone|dethpc|dethpc||normal|normal|1|1

"""
QOS_OUT = "normal||\nlimited|2|1\nbig|100|\n\n"


def test_parse_user_assocs() -> None:
    u = parse_user_assocs(USER_OUT, "dethpc-user")
    assert u.default_account == "ml-team"
    assert u.assocs == (
        Assoc("ml-team", "", ("limited",), "limited", None, None),
        Assoc("dethpc", "", ("normal", "limited"), "", None, None),
        Assoc("dethpc", "high", ("normal",), "normal", 5, 3),
    )
    assert parse_user_assocs("", "x") == UserAssocs("x", "", ())


def test_parse_qos_limits() -> None:
    assert parse_qos_limits(QOS_OUT) == {"normal": QosLimits(None, None),
                                         "limited": QosLimits(2, 1),
                                         "big": QosLimits(100, None)}


@pytest.mark.parametrize(("assoc", "asked", "expected"), [
    (None, None, None),
    (None, "limited", "limited"),
    (Assoc("a", qos=("normal", "limited"), default_qos="limited"), None, "limited"),
    (Assoc("a", qos=("limited",)), None, "limited"),               # its only QoS
    (Assoc("a", qos=("normal", "limited")), None, "normal"),       # Slurm's fallback
    (Assoc("a", qos=("big", "limited")), None, None),              # unknown
    (Assoc("a", qos=("limited",), default_qos="limited"), "normal", "normal"),
])
def test_job_qos(assoc: Assoc | None, asked: str | None, expected: str | None) -> None:
    assert job_qos(assoc, asked) == expected


USER = parse_user_assocs(USER_OUT, "dethpc-user")
QOS = parse_qos_limits(QOS_OUT)


@pytest.mark.parametrize(("pool", "expected"), [
    # nothing asked: the user's default account (ml-team) and its default QoS (limited)
    (dict(partition="debug", qos=None, account=None),
     PoolLimits("limited", "ml-team", (Limit("qos", "limited", 2, 1),))),
    # another account whose association names no default QoS: normal, unlimited
    (dict(partition="debug", qos=None, account="dethpc"), PoolLimits("normal", "dethpc", ())),
    # ... but asking for the limited QoS there brings its limits
    (dict(partition="debug", qos="limited", account="dethpc"),
     PoolLimits("limited", "dethpc", (Limit("qos", "limited", 2, 1),))),
    # the partition's own association carries MaxSubmitJobs/MaxJobs
    (dict(partition="high", qos=None, account="dethpc"),
     PoolLimits("normal", "dethpc", (Limit("assoc", "dethpc", 5, 3),))),
    (dict(partition="high", qos="big", account="dethpc"),
     PoolLimits("big", "dethpc", (Limit("qos", "big", 100, None), Limit("assoc", "dethpc", 5, 3)))),
    # the pool's own sbatch_args win over its fields
    (dict(partition="debug", qos=None, account=None,
          extra_args=("--account=dethpc", "--partition=high")),
     PoolLimits("normal", "dethpc", (Limit("assoc", "dethpc", 5, 3),))),
    (dict(partition="debug", qos="limited", account=None, extra_args=("--qos=normal",)),
     PoolLimits("normal", "ml-team", ())),
    # an account the user has no association with: nothing known, no limit
    (dict(partition="debug", qos=None, account="nosuch"), PoolLimits(None, "nosuch", ())),
])
def test_pool_limits(pool: dict, expected: PoolLimits) -> None:
    assert pool_limits(USER, QOS, **pool) == expected


def job(state: JobState, qos: str = "limited", account: str = "ml-team") -> JobInfo:
    return JobInfo(ref="1", state=state, qos=qos, account=account)


LIMITED = PoolLimits("limited", "ml-team", (Limit("qos", "limited", 2, 1),))
BOTH = PoolLimits("limited", "ml-team", (Limit("qos", "limited", 3, None),
                                         Limit("assoc", "ml-team", 5, None)))


@pytest.mark.parametrize(("pool", "jobs", "expected"), [
    (UNLIMITED, [job(S.PENDING)] * 50, None),                       # no submit limit
    (PoolLimits("normal", "dethpc", (Limit("qos", "normal", None, 4),)), [], None),
    (LIMITED, [], 2),
    (LIMITED, [job(S.RUNNING)], 1),
    (LIMITED, [job(S.RUNNING), job(S.PENDING)], 0),                 # pending counts too
    (LIMITED, [job(S.SUSPENDED)], 1),
    (LIMITED, [job(S.RUNNING)] * 3, 0),                             # over: never negative
    # ended jobs squeue still lists (MinJobAge) do not count
    (LIMITED, [job(S.COMPLETED), job(S.FAILED), job(S.CANCELLED), job(S.UNKNOWN)], 2),
    # jobs in another QoS do not count against this QoS's limit
    (LIMITED, [job(S.RUNNING, qos="normal", account="dethpc")] * 10, 2),
    # a job whose QoS the poll did not say counts (fewer jobs, never a refusal)
    (LIMITED, [job(S.RUNNING, qos="")], 1),
    # the tighter of the QoS and the association limits wins
    (BOTH, [job(S.PENDING)] * 2, 1),
    (BOTH, [job(S.PENDING, qos="normal")] * 4, 1),                  # same account, other QoS
    (BOTH, [job(S.PENDING, qos="normal", account="x")] * 4, 3),
])
def test_headroom(pool: PoolLimits, jobs: list[JobInfo], expected: int | None) -> None:
    assert headroom(pool, jobs) == expected


def test_counted_counts_array_tasks_one_by_one() -> None:
    tasks = [JobInfo(ref=f"7_{i}", state=S.PENDING, qos="limited") for i in range(3)]
    assert counted(tasks, Limit("qos", "limited", 2)) == 3
    assert counted_live([*tasks, job(S.COMPLETED)]) == 3


def test_a_submitted_pool_job_counts_until_the_next_poll() -> None:
    assert headroom(LIMITED, [LIMITED.tag()]) == 1
    assert str(Limit("qos", "limited", 2, 1)) == "QoS 'limited' (MaxSubmitJobs=2, MaxJobs=1)"


@pytest.mark.parametrize(("stderr", "word"), [
    # what sbatch 22.05 prints over the limited QoS (tests/slurm/test_devcluster.py)
    ("sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission "
     "failed: Job violates accounting/QOS policy (job submit limit, user's size and/or "
     "time limits)", "QOSMaxSubmitJobPerUserLimit"),
    ("sbatch: error: AssocMaxSubmitJobLimit\nsbatch: error: Batch job submission failed: "
     "Job violates accounting/QOS policy", "AssocMaxSubmitJobLimit"),
    ("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
     "(job submit limit, user's size and/or time limits)", "Job violates accounting/QOS policy"),
    ("sbatch: error: QOSGrpSubmitJobsLimit", "QOSGrpSubmitJobsLimit"),
    ("sbatch: error: Batch job submission failed: Resource temporarily unavailable",
     "Resource temporarily unavailable"),
    # a reason about the job itself, not about how many are queued: a real error
    ("sbatch: error: QOSMaxWallDurationPerJobLimit\nsbatch: error: Batch job submission "
     "failed: Job violates accounting/QOS policy (job submit limit, user's size and/or "
     "time limits)", None),
    ("sbatch: error: AssocMaxCpuPerJobLimit\nsbatch: error: Batch job submission failed: "
     "Job violates accounting/QOS policy", None),
    # real errors: not waited out
    ("sbatch: error: Batch job submission failed: Invalid partition name specified", None),
    ("sbatch: error: Batch job submission failed: Requested node configuration is not "
     "available", None),
    ("sbatch: error: Invalid --array specification", None),
    ("", None),
])
def test_limit_refusal(stderr: str, word: str | None) -> None:
    assert limit_refusal(stderr) == word


@pytest.mark.parametrize(("words", "expected"), [
    # sbatch --test-only as dethpc-user with 2 jobs queued (sbatch_refusal's joined words)
    ("QOSMaxSubmitJobPerUserLimit; Job violates accounting/QOS policy (job submit limit, "
     "user's size and/or time limits)", True),
    ("AssocGrpSubmitJobsLimit; Job violates accounting/QOS policy", True),
    ("QOSMaxWallDurationPerJobLimit; Job violates accounting/QOS policy", False),
    ("Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)",
     False),  # no reason given: the job may well be what is refused
    ("Invalid qos specification", False),
])
def test_at_submit_limit(words: str, expected: bool) -> None:
    assert at_submit_limit(words) is expected


@pytest.mark.parametrize(("word", "live", "trials", "final"), [
    ("QOSMaxSubmitJobPerUserLimit", 2, 1, False),   # jobs will end and make room
    ("QOSMaxSubmitJobPerUserLimit", 0, 1, True),    # a limit of 0: nothing will make room
    ("QOSMaxSubmitJobPerUserLimit", 0, 6, False),   # an array over the limit: try smaller
    ("Job violates accounting/QOS policy", 0, 1, True),
    ("Resource temporarily unavailable", 0, 1, False),  # the cluster's, not the user's
])
def test_refusal_is_final(word: str, live: int, trials: int, final: bool) -> None:
    assert refusal_is_final(word, live, trials) is final


def test_the_cap_after_refusals_halves_then_doubles_back_to_none() -> None:
    """6 trials refused under an unseen limit of 2 (the dev cluster's, hidden): 6 -> 3
    refused -> 1 accepted -> 2 -> 4 -> 8 > 6: no cap."""
    assert [cap_after_refusal(n) for n in (6, 3, 2, 1, 0)] == [3, 1, 1, 1, 1]
    steps, cap = [], cap_after_refusal(3)
    while cap is not None:
        steps.append(cap)
        cap = cap_after_success(cap, 6)
    assert steps == [1, 2, 4]
    assert cap_after_success(None, 6) is None
