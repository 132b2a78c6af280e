"""The pure parts of pacing under slurmctld's per-user RPC rate limit (issue 34 item 4):
reading the limit, who is exempt, what each command costs (the figures measured with
sdiag on Slurm 25.11, docs/backends.md), and the pacer's waits on a fake clock."""

from __future__ import annotations

import pytest

from dethpc.backends.slurm_ratelimit import (
    RateLimit,
    RpcPacer,
    parse_rate_limit,
    rpc_cost,
    subject_to_limit,
)


@pytest.mark.parametrize(("params", "expected"), [
    ("(null)", None),
    ("", None),
    ("enable_configless", None),
    ("rl_enable", RateLimit(30, 2, 1)),  # Slurm's defaults
    ("rl_enable,rl_bucket_size=10,rl_refill_rate=1,rl_refill_period=10", RateLimit(10, 1, 10)),
    ("enable_configless, rl_enable ,rl_bucket_size=50", RateLimit(50, 2, 1)),
    ("rl_enable,rl_bucket_size=0,rl_refill_rate=x", RateLimit(30, 2, 1)),
    ("rl_bucket_size=10", None),  # settings without rl_enable limit nothing
])
def test_parse_rate_limit(params: str, expected: RateLimit | None) -> None:
    assert parse_rate_limit({"SlurmctldParameters": params}) == expected


@pytest.mark.parametrize(("slurm_user", "uid", "subject"), [
    ("root(0)", 0, False),
    ("root(0)", 1001, True),
    ("slurm(64030)", 64030, False),
    ("slurm(64030)", 1001, True),
    ("", 1001, True),
])
def test_subject_to_limit(slurm_user: str, uid: int, subject: bool) -> None:
    assert subject_to_limit({"SlurmUser": slurm_user}, uid) is subject


@pytest.mark.parametrize(("argv", "cost"), [
    (["squeue", "--user", "u", "-h"], 3),
    (["/opt/slurm/bin/squeue", "--jobs", "1"], 3),
    (["squeue", "--local", "--user", "u", "-h"], 2),    # no FED_INFO
    (["scontrol", "show", "federation"], 1),
    (["sbatch", "--parsable", "--array=0-999", "x.sbatch"], 1),
    (["scancel", "1", "2_3", "4"], 3),
    (["scancel", "2_[3-9,12]", "4"], 2),                 # a bracket form: one KILL_JOB
    (["scancel", "--signal=USR1", "--batch", "7"], 1),
    (["scontrol", "requeue", "1,2,3"], 3),
    (["scontrol", "release", "9"], 1),
    (["scontrol", "update", "JobId=5", "ArrayTaskThrottle=2"], 1),
    (["scontrol", "show", "config"], 2),
    (["scontrol", "-o", "show", "job", "5"], 2),
    (["scontrol", "--local", "-o", "show", "job", "5"], 1),
    (["scontrol", "show", "partition"], 1),
    (["scontrol", "--version"], 0),
    (["sinfo", "-h"], 2),
    (["sacct", "-j", "1"], 0),
    (["sacctmgr", "show", "qos"], 0),
    (["python", "-c", "x"], 0),
    (["pyslurm.Jobs.load"], 1),
    ([], 0),
])
def test_rpc_cost(argv: list[str], cost: int) -> None:
    assert rpc_cost(argv) == cost


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def test_without_a_limit_the_pacer_never_waits() -> None:
    clock = Clock()
    pacer = RpcPacer(clock, clock.sleep)
    for _ in range(100):
        pacer.before(["squeue", "--user", "u"])
    assert clock.slept == [] and pacer.rpcs == 0


def test_the_pacer_keeps_the_site_rate_and_a_reserve() -> None:
    """bucket 10, 1 token per 10 s: 2 tokens stay the user's, the copy starts half full
    (4 of 8), and 3-RPC polls then go at most every 3 / (0.1 * 0.6) s."""
    clock = Clock()
    pacer = RpcPacer(clock, clock.sleep)
    pacer.configure(RateLimit(10, 1, 10))
    start = clock.now
    for _ in range(11):
        pacer.before(["squeue", "--user", "u"])
    spent = 33
    elapsed = clock.now - start
    # never more than the usable bucket plus the refill in that time (slurmctld's rule)
    assert spent <= 8 + elapsed * 0.1
    assert elapsed == pytest.approx((spent - 4) / 0.06, rel=1e-6)
    assert pacer.waits == 10


def test_a_command_costing_more_than_the_bucket_waits_for_a_full_one() -> None:
    clock = Clock()
    pacer = RpcPacer(clock, clock.sleep)
    pacer.configure(RateLimit(10, 1, 10))
    pacer.before(["scancel", *map(str, range(20))])  # 20 RPCs: waits for 8, owes 12
    assert clock.slept == [pytest.approx(4 / 0.06)]
    assert pacer.tokens == pytest.approx(-12)
    pacer.before(["sbatch", "x"])
    assert clock.slept[-1] == pytest.approx(13 / 0.06)


def test_the_default_limit_does_not_slow_a_daemon_tick() -> None:
    """Slurm's defaults (30 tokens, 2 per second, of which the daemon plans with 1.2): a
    squeue every 3 s never waits."""
    clock = Clock()
    pacer = RpcPacer(clock, clock.sleep)
    pacer.configure(RateLimit(30, 2, 1))
    for _ in range(200):
        pacer.before(["squeue", "--user", "u"])
        clock.now += 3
    assert clock.slept == []


def test_a_slow_command_halves_the_rate_and_quick_ones_earn_it_back() -> None:
    """A command slurmctld told to back off comes back after libslurm's sleep(1): the
    pacer takes it for a refusal (someone else drew on the bucket)."""
    clock = Clock()
    pacer = RpcPacer(clock, clock.sleep)
    pacer.configure(RateLimit(10, 1, 10))
    squeue = ["squeue", "--user", "u"]
    pacer.after(squeue, 0.05)
    assert (pacer.refused, pacer.factor) == (0, 1.0)
    pacer.after(squeue, 3.0)
    pacer.after(squeue, 1.0)
    assert pacer.refused == 2 and pacer.factor == 0.25 and pacer.tokens <= 0
    assert pacer.rate == pytest.approx(0.1 * 0.6 * 0.25)
    for _ in range(3):
        pacer.after(squeue, 3.0)
    assert pacer.factor == 0.125  # never slower than an eighth of the site's rate
    for _ in range(100):
        pacer.after(squeue, 0.05)
    assert pacer.factor == 1.0
    pacer.after(["sacct", "-j", "1"], 5.0)  # slurmdbd's slowness is not slurmctld's
    assert pacer.factor == 1.0


def test_the_runner_asks_the_pacer_before_and_after_each_attempt() -> None:
    from dethpc.common.runner import CommandRunner

    seen: list[tuple[str, tuple[str, ...]]] = []

    class Spy:
        def before(self, argv: object) -> None:
            seen.append(("before", tuple(argv)))  # type: ignore[arg-type]

        def after(self, argv: object, seconds: float) -> None:
            seen.append(("after", tuple(argv)))  # type: ignore[arg-type]

    CommandRunner(pacer=Spy()).run(["true"])
    assert seen == [("before", ("true",)), ("after", ("true",))]
