"""Per-user job limits: how many more jobs the user may submit, and Slurm's refusals.

Owns: the value types of a site's per-user limits as they apply to one resource
pool (``Limit``, ``PoolLimits``), counting the user's jobs the way Slurm counts
them against those limits (``counted``), the submit headroom that follows
(``headroom``), and the classification of an ``sbatch`` refusal as "over a
limit: wait and retry" (``limit_refusal``).
Must not: run commands, read the store or know where the numbers come from
(``dethpc.backends.slurm_limits`` parses sacctmgr; the daemon applies the result).

How Slurm counts (checked on the 22.05 dev cluster, see docs/backends.md):
``MaxSubmitJobs*`` counts the user's pending plus running (and suspended) jobs,
every array task as one job, including the pending tasks Slurm has not split off
the array yet: an ``--array=0-2`` is refused outright under a limit of 2. A QoS
limit counts only jobs in that QoS, an association limit only jobs of that
account. ``MaxJobs*`` (running) does not refuse anything: over it, jobs wait
with the pending reason ``QOSMaxJobsPerUserLimit`` / ``AssocMaxJobsLimit``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dethpc.backends.base import JobInfo, JobState

#: states a job counts against a submit limit in (pending, running, suspended)
_LIVE = (JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED)


@dataclass(frozen=True)
class Limit:
    """One per-user limit: on a QoS (``MaxSubmitJobsPerUser``/``MaxJobsPerUser``) or
    on the user's association with an account (``MaxSubmitJobs``/``MaxJobs``)."""

    scope: str                      # "qos" or "assoc"
    name: str                       # the QoS name or the account name
    max_submit: int | None = None   # pending + running jobs (tasks) the user may have
    max_jobs: int | None = None     # running jobs the user may have

    def applies_to(self, job: JobInfo) -> bool:
        """True when Slurm counts ``job`` against this limit. A job whose QoS or
        account the poll did not report counts (erring on the side of fewer jobs)."""
        value = job.qos if self.scope == "qos" else job.account
        return not value or value == self.name

    def __str__(self) -> str:
        what = "QoS" if self.scope == "qos" else "association with account"
        parts = [f"{k}={v}" for k, v in (("MaxSubmitJobs", self.max_submit),
                                         ("MaxJobs", self.max_jobs)) if v is not None]
        return f"{what} {self.name!r} ({', '.join(parts) or 'no per-user limit'})"


@dataclass(frozen=True)
class PoolLimits:
    """The per-user limits a pool's jobs fall under: the QoS and account they run in
    (the pool's own, else the user's defaults; ``None`` when unknown) and the limits."""

    qos: str | None = None
    account: str | None = None
    limits: tuple[Limit, ...] = ()

    @property
    def max_submit(self) -> int | None:
        """The tightest submit limit, ``None`` when there is none."""
        values = [lim.max_submit for lim in self.limits if lim.max_submit is not None]
        return min(values) if values else None

    def tag(self) -> JobInfo:
        """A stand-in for one job this pool just submitted (not yet seen by a poll)."""
        return JobInfo(ref="", state=JobState.PENDING, qos=self.qos or "",
                       account=self.account or "")


#: no limits at all (the local backend, or a site without per-user limits)
UNLIMITED = PoolLimits()


def counted(jobs: Iterable[JobInfo], limit: Limit) -> int:
    """How many of ``jobs`` (one ``JobInfo`` per array task) Slurm counts against
    ``limit``'s submit limit: live ones in its QoS / account."""
    return sum(1 for j in jobs if j.state in _LIVE and limit.applies_to(j))


def counted_live(jobs: Iterable[JobInfo]) -> int:
    """How many of ``jobs`` are live (pending, running or suspended), whatever their scope."""
    return sum(1 for j in jobs if j.state in _LIVE)


def headroom(pool: PoolLimits, jobs: Iterable[JobInfo]) -> int | None:
    """How many more jobs (array tasks) the user may submit into ``pool`` now, given
    the user's jobs ``jobs``; ``None`` when no submit limit applies. Never negative."""
    listed = list(jobs)
    rooms = [max(0, lim.max_submit - counted(listed, lim))
             for lim in pool.limits if lim.max_submit is not None]
    return min(rooms) if rooms else None


#: Slurm's words for a submission refused over a limit (the job would never run
#: until some of the user's jobs end); matched in sbatch's stderr.
LIMIT_REFUSALS = (
    "QOSMaxSubmitJobPerUserLimit", "QOSMaxSubmitJobPerAccountLimit",
    "AssocMaxSubmitJobLimit", "AssocGrpSubmitJobsLimit", "QOSGrpSubmitJobsLimit",
    "Job violates accounting/QOS policy",
    "Resource temporarily unavailable",  # slurmctld busy, or MaxJobCount reached
)
#: refusals that depend on the user's jobs; the others are about the cluster as a whole
_USER_BOUND = LIMIT_REFUSALS[:-1]


def limit_refusal(stderr: str) -> str | None:
    """The matching word when sbatch's ``stderr`` says the job was refused over a
    limit (wait and retry), else ``None`` (a real error). The most specific word
    wins: "... policy (job submit limit, user's size and/or time limits)" and
    "QOSMaxSubmitJobPerUserLimit" in one message give the latter."""
    for word in LIMIT_REFUSALS:
        if word in stderr:
            return word
    return None


def refusal_is_final(word: str, user_live_jobs: int, trials: int) -> bool:
    """A limit refusal is final (an error, not a wait) when it depends on the user's own
    jobs, the user has none live (none will end to make room) and the submission held
    one trial (a smaller one cannot be tried): a limit of 0, or a job over a per-job
    policy limit that Slurm words the same way. An array of several trials is retried
    smaller instead (it may simply be larger than the limit)."""
    return word in _USER_BOUND and user_live_jobs == 0 and trials <= 1
