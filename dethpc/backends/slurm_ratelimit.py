"""Staying under slurmctld's per-user RPC rate limit (``SlurmctldParameters=rl_enable``,
Slurm 23.02 and later).

slurmctld keeps a token bucket per user (``rl_bucket_size`` tokens, ``rl_refill_rate``
added every ``rl_refill_period`` seconds; Slurm's defaults 30, 2, 1) and answers an RPC
that finds it empty with ``SLURMCTLD_COMMUNICATIONS_BACKOFF``; libslurm then sleeps 1,
2, 3 ... seconds and asks again, so a refused command is slow, not failed. root and
SlurmUser are exempt (``rate_limit_exceeded`` in slurmctld/rate_limit.c).

Owns: reading the site's limit from ``scontrol show config`` (``parse_rate_limit``),
whether this process is subject to it (``subject_to_limit``), what each command dethpc
runs costs in slurmctld RPCs (``rpc_cost``, measured with ``sdiag`` on Slurm 25.11:
docs/backends.md) and ``RpcPacer``, the runner's pacer: a copy of slurmctld's bucket
for this process that keeps a reserve for the user's own commands (their ``squeue`` in
a terminal and their jobs' ``srun`` draw on the same bucket), waits before a command
that would overdraw it until it would not, and halves its rate when a command comes
back as slowly as a refused one (libslurm sleeps before asking again). All pure but
the pacer's clock and sleep, which are injected.
Must not: run commands or read the config itself (``SlurmSite`` hands it the config).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: Slurm's defaults when ``rl_enable`` is on without the other settings
DEFAULT_BUCKET, DEFAULT_REFILL_RATE, DEFAULT_REFILL_PERIOD = 30, 2, 1
#: the part of the site's refill rate the daemon plans with: the rest is left to the
#: user's jobs (each trial's ``srun`` sends 2 RPCs as the user when its step starts) and
#: their own commands. Measured on 25.11 (tests/slurm/test_ratelimit_slurm.py, 6
#: trials, bucket 10, 1 token per 2 s): with 0.9 the daemon still had 2 RPCs refused
#: while the trials' steps had 24; with 0.6, see docs/backends.md
RATE_MARGIN = 0.6
#: a paced command that took this long was (very likely) refused: libslurm's first
#: answer to SLURMCTLD_COMMUNICATIONS_BACKOFF is sleep(1) (slurm_protocol_api.c); a
#: squeue of 10,000 jobs takes 0.14 s here (bench/results/pyslurm_vs_cli.json)
REFUSED_AFTER_S = 1.0
#: after a refusal the pacer halves its rate (to at most 1/8 of the site's), and
#: earns a twentieth of it back per command that went through at once
SLOWEST, RECOVERY = 0.125, 0.05


@dataclass(frozen=True)
class RateLimit:
    bucket_size: int
    refill_rate: int
    refill_period: int

    @property
    def per_second(self) -> float:
        return self.refill_rate / self.refill_period

    @property
    def reserve(self) -> int:
        """Tokens left to the user's own commands: a fifth of the bucket, at least 1."""
        return max(1, self.bucket_size // 5)


def parse_rate_limit(config: Mapping[str, str]) -> RateLimit | None:
    """The site's per-user RPC limit from ``scontrol show config`` (None: not enabled).
    A value slurmctld would refuse to start with cannot be read here; Slurm's default
    stands in for it."""
    params = config.get("SlurmctldParameters", "")
    words = [w.strip() for w in params.split(",") if w.strip()]
    if "rl_enable" not in words:
        return None
    found: dict[str, int] = {}
    for w in words:
        key, _, value = w.partition("=")
        if key in ("rl_bucket_size", "rl_refill_rate", "rl_refill_period") and value.isdigit() \
                and int(value) > 0:
            found[key] = int(value)
    return RateLimit(found.get("rl_bucket_size", DEFAULT_BUCKET),
                     found.get("rl_refill_rate", DEFAULT_REFILL_RATE),
                     found.get("rl_refill_period", DEFAULT_REFILL_PERIOD))


def subject_to_limit(config: Mapping[str, str], uid: int) -> bool:
    """False for root and for SlurmUser (``SlurmUser = slurm(64030)``): slurmctld exempts
    both."""
    if uid == 0:
        return False
    m = re.search(r"\((\d+)\)", config.get("SlurmUser", ""))
    return not (m and int(m.group(1)) == uid)


#: slurmctld RPCs per command (measured with sdiag as a non-root user on 25.11):
#: squeue --user 3 (PARTITION_INFO, FED_INFO, JOB_USER_INFO), squeue --jobs 2 (3 on
#: 22.05); ``--local`` spares FED_INFO (squeue --local --user 2, measured on 22.05);
#: ``scontrol show federation`` 1 (FED_INFO); scancel ``123_[1-9]`` 1 (22.05);
#: sinfo 2 (PARTITION_INFO, NODE_INFO); ``scontrol show config`` 2 (BUILD_INFO, PING);
#: ``scontrol show job`` 2 (FED_INFO, JOB_INFO_SINGLE), with ``--local`` 1 (22.05);
#: sbatch 1 whatever the array's size; scontrol update 1; scancel and scontrol
#: requeue/release/hold 1 per job named (KILL_JOB, JOB_REQUEUE each); sacct, sacctmgr
#: and sreport 0 (they ask slurmdbd).
#: pyslurm's ``Jobs.load()`` (run in-process, named by ``pyslurm_query.PYSLURM_LOAD``) 1
#: (JOB_INFO).
_FIXED = {"squeue": 3, "sinfo": 2, "sbatch": 1, "sdiag": 1, "sprio": 1, "sshare": 1,
          "pyslurm.Jobs.load": 1}
_NONE = ("sacct", "sacctmgr", "sreport")
_PER_JOB_SCONTROL = ("requeue", "requeuehold", "release", "hold", "uhold", "suspend",
                     "resume")


def rpc_cost(argv: Sequence[str]) -> int:
    """slurmctld RPCs that ``argv`` makes (0: not a Slurm command, or one that asks only
    slurmdbd, or only prints its version)."""
    if not argv:
        return 0
    prog = argv[0].rsplit("/", 1)[-1]
    rest = list(argv[1:])
    if "--version" in rest or "-V" in rest:
        return 0
    if prog in _NONE:
        return 0
    if prog == "squeue" and "--local" in rest:
        return _FIXED[prog] - 1     # no FED_INFO
    if prog in _FIXED:
        return _FIXED[prog]
    if prog == "scancel":
        return max(1, len([a for a in rest if not a.startswith("-")]))
    if prog == "scontrol":
        words = [a for a in rest if not a.startswith("-")]
        if not words:
            return 1
        verb = words[0].lower()
        if verb in _PER_JOB_SCONTROL:
            return max(1, sum(len([j for j in w.split(",") if j]) for w in words[1:]))
        what = words[1].lower() if verb == "show" and len(words) > 1 else ""
        if what == "job":
            return 1 if "--local" in rest else 2    # --local: no FED_INFO
        return 2 if what == "config" else 1
    return 0


class RpcPacer:
    """The runner's pacer: waits before a Slurm command until this process's copy of
    slurmctld's bucket holds its cost (a command costing more than the usable bucket
    waits for a full one and leaves it in debt). Without a limit (the default, and for
    exempt users) it never waits."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.clock = clock
        self.sleep = sleep
        self.limit: RateLimit | None = None
        self.tokens = 0.0
        self.stamp = 0.0
        #: what the pacer did, for the benchmark and ``dethpc admin check``
        self.waited_s = 0.0
        self.waits = 0
        self.rpcs = 0
        #: commands that came back slowly enough to have been refused (``after``)
        self.refused = 0
        #: the part of the planned rate in force (halved after each refusal)
        self.factor = 1.0

    def configure(self, limit: RateLimit | None) -> None:
        """Start pacing for ``limit`` (None: stop). The copy starts half full: the
        user may have spent the real bucket just before."""
        if limit == self.limit:
            return
        self.limit = limit
        if limit is not None:
            self.tokens = self.capacity / 2
            self.stamp = self.clock()
            log.info("slurmctld limits this user's RPCs (bucket %d, %d every %d s): dethpc "
                     "paces its Slurm commands to %.2f RPCs/s and keeps %d for the user",
                     limit.bucket_size, limit.refill_rate, limit.refill_period,
                     self.rate, limit.reserve)

    @property
    def capacity(self) -> float:
        assert self.limit is not None
        return float(max(1, self.limit.bucket_size - self.limit.reserve))

    @property
    def rate(self) -> float:
        assert self.limit is not None
        return self.limit.per_second * RATE_MARGIN * self.factor

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def delay(self, cost: int) -> float:
        """Seconds to wait before spending ``cost`` tokens (0 without a limit)."""
        if self.limit is None or cost <= 0:
            return 0.0
        self._refill()
        need = min(float(cost), self.capacity)
        return max(0.0, (need - self.tokens) / self.rate)

    def spend(self, cost: int) -> None:
        if self.limit is None or cost <= 0:
            return
        self._refill()
        self.tokens -= cost
        self.rpcs += cost

    def before(self, argv: Sequence[str]) -> None:
        """The runner's hook: wait for, then spend, ``argv``'s RPCs."""
        cost = rpc_cost(argv)
        wait = self.delay(cost)
        if wait > 0:
            self.waits += 1
            self.waited_s += wait
            log.debug("pacing `%s` (%d RPCs): waiting %.1f s for slurmctld's rate limit",
                      " ".join(argv[:2]), cost, wait)
            self.sleep(wait)
        self.spend(cost)

    def after(self, argv: Sequence[str], seconds: float) -> None:
        """The runner's other hook: a paced command that took ``REFUSED_AFTER_S`` or
        more was told to back off by slurmctld (someone else drew on the same bucket:
        the user's own commands, their jobs' ``srun``): the copy is emptied and the
        rate halved; a quick one earns some rate back."""
        if self.limit is None or rpc_cost(argv) <= 0:
            return
        self._refill()
        if seconds >= REFUSED_AFTER_S:
            self.refused += 1
            self.factor = max(SLOWEST, self.factor / 2)
            self.tokens = min(self.tokens, 0.0)
            log.info("`%s` took %.1f s: slurmctld rate-limits this user; dethpc slows "
                     "its Slurm commands to %.2f RPCs/s", " ".join(argv[:2]), seconds,
                     self.rate)
        else:
            self.factor = min(1.0, self.factor + RECOVERY)
