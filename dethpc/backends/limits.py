"""Per-user job limits: how many more jobs the user may submit, and Slurm's refusals.

Owns: counting the user's jobs the way Slurm counts
them against those limits (``counted``), the submit headroom that follows
(``headroom``), the classification of an ``sbatch`` refusal as "over a
limit: wait and retry" (``limit_refusal``, ``refusal_is_final``) and the size cap
after refusals over a limit dethpc cannot see (``cap_after_refusal``,
``cap_after_success``).
The value types (``Limit``, ``PoolLimits``) are ``dethpc.backends.base``'s: every backend
answers with them.
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

import re
from collections.abc import Iterable

from dethpc.backends.base import JobInfo, JobState, Limit, PoolLimits

#: states a job counts against a submit limit in (pending, running, suspended)
_LIVE = (JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED)


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


#: Slurm's reasons for refusing a submission over a limit on how many jobs may be
#: queued: the job is fine, the user (or group) just has too many now.
COUNT_LIMITS = (
    "QOSMaxSubmitJobPerUserLimit", "QOSMaxSubmitJobPerAccountLimit",
    "AssocMaxSubmitJobLimit", "AssocGrpSubmitJobsLimit", "QOSGrpSubmitJobsLimit",
)
#: the cluster as a whole is full or busy (MaxJobCount reached, slurmctld EAGAIN)
_TRANSIENT = ("Resource temporarily unavailable",)
#: what sbatch prints after any accounting refusal, with or without a reason word
_POLICY = "Job violates accounting/QOS policy"
_REASON_WORD = re.compile(r"\b(?:QOS|Assoc)\w*Limit\b")
#: every word ``limit_refusal`` may answer
LIMIT_REFUSALS = (*COUNT_LIMITS, *_TRANSIENT, _POLICY)


def limit_refusal(stderr: str) -> str | None:
    """The word that makes sbatch's ``stderr`` a refusal over a limit on how many jobs
    may be queued (wait and retry), else ``None`` (a real error). Slurm 22.05 prints
    the reason word, then "Job violates accounting/QOS policy (...)": a reason about
    the job itself (``QOSMaxWallDurationPerJobLimit``, ``QOSMaxTresPerJob``...) is a
    real error; the bare policy sentence (no reason word) is read as a count limit."""
    for word in (*COUNT_LIMITS, *_TRANSIENT):
        if word in stderr:
            return word
    if _POLICY in stderr and not _REASON_WORD.search(stderr):
        return _POLICY
    return None


def at_submit_limit(words: str) -> bool:
    """True when Slurm refused only because the user (or group) has too many jobs
    queued now: a verdict on the moment, not on the job (``sbatch --test-only`` says
    so too)."""
    return any(word in words for word in COUNT_LIMITS)


#: refusals that depend on the user's jobs; the others are about the cluster as a whole
_USER_BOUND = (*COUNT_LIMITS, _POLICY)


def refusal_is_final(word: str, user_live_jobs: int, trials: int) -> bool:
    """A limit refusal is final (an error, not a wait) when it depends on the user's own
    jobs, the user has none live (none will end to make room) and the submission held
    one trial (a smaller one cannot be tried): a limit of 0, or a job over a per-job
    policy limit that Slurm words the same way. An array of several trials is retried
    smaller instead (it may simply be larger than the limit)."""
    return word in _USER_BOUND and user_live_jobs == 0 and trials <= 1


def cap_after_refusal(size: int) -> int:
    """Most trials per submission after sbatch refused ``size`` over a limit dethpc
    could not count: half, at least one."""
    return max(1, size // 2)


def cap_after_success(cap: int | None, refused_size: int) -> int | None:
    """The cap after an accepted submission: doubled, and gone (None) once it would
    exceed the size that was refused (the unseen limit has room again)."""
    if cap is None:
        return None
    return None if cap * 2 > refused_size else cap * 2
