"""The batched poll of Slurm, and ``find`` (adoption by job name).

Owns: ``SlurmPoll`` — ``poll``: one ``squeue`` (or pyslurm's live-job query, where a
build matching the running Slurm is importable: chosen on the first poll) for live
jobs (``--local`` on a cluster in no federation, ``SlurmSite.local_only``: two RPCs
instead of three), at most one ``sacct`` for the refs that left the queue, and one
``sdiag`` only when sacct lacks one of them; how long a job missing from sacct is still no news
(``SETTLE_S`` after sacct failed or slurmctld held unsent accounting records); the
user's jobs the last squeue listed (``user_jobs``); a ref this backend cancelled
(``note_cancelled``, kept ``CANCELLED_MEMORY_S``) that squeue no longer lists while sacct
has no record of it or a PENDING one reads CANCELLED, with no sdiag (a pending array
task cancelled leaves the queue at once and gets no record of its own: sacct's record
of the array's pending remainder names it until slurmdbd catches up, read as PENDING it
had the pool's tender cancel the same workers again every tick, 69 of the 160 RPCs of a
64-trial pool cell; cancelled in one bracket form, it has no record at all, read as
missing it cost a sacct and an sdiag every poll);
``find``: one squeue and one sacct by name. Pure pieces with table tests: the argv of
each query (``squeue_argv``, ``sacct_argv``, ``find_squeue_argv``, ``find_sacct_argv``),
``settle`` (one poll's answer), ``pick`` (a ref's record, an array task falling back
to its array's) and ``accounting_disabled``.
Must not: parse Slurm's text itself (``slurm_parse`` does), run commands except
through the ``CommandRunner`` it was given, loop per job, or read site facts other
than whether accounting is on (``SlurmSite``, which it tells when sacct says it is off).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from dethpc.backends import slurm_parse as sp
from dethpc.backends.base import JobInfo, JobState
from dethpc.backends.pyslurm_query import (
    PYSLURM_LOAD,
    PyslurmQuery,
    installed_version,
    load_query,
    probe_argv,
    probed_version,
    versions_match,
)
from dethpc.backends.slurm_actions import GONE
from dethpc.backends.slurm_site import SlurmSite
from dethpc.common.errors import CommandError
from dethpc.common.jobref import JobRef, parse_job_id, sort_key
from dethpc.common.runner import CommandResult, CommandRunner

log = logging.getLogger(__name__)

#: stderr of sacct on a cluster without accounting
NO_ACCOUNTING = ("accounting storage is disabled",)
#: the reason of a job this backend cancelled that neither squeue nor sacct knows as
#: ended (``SlurmPoll.note_cancelled``): a pending array task has no record of its own
CANCELLED_PENDING = "cancelled by dethpc; no accounting record of its own (pending)"
#: how long a poll remembers the jobs this backend cancelled (monotonic seconds)
CANCELLED_MEMORY_S = 24 * 3600.0
#: how far back ``find`` looks in accounting
FIND_WINDOW = "now-14days"
#: seconds after sacct last failed, or slurmctld last held unsent accounting records,
#: during which a job missing from sacct is still no news: sdiag's queue reads 0 while
#: the last records are in flight to slurmdbd (a probe saw one such poll)
SETTLE_S = 10.0


# ------------------------------------------------------------------- pure pieces
def squeue_argv(bases: Sequence[str], user: str | None, local: bool = False) -> list[str]:
    """The poll's one squeue: all of ``user``'s jobs, else the jobs ``bases``;
    ``local``: this cluster's alone, with no federation query first (one RPC less)."""
    which = f"--user={user}" if user is not None else f"--jobs={','.join(bases)}"
    return ["squeue", *(["--local"] if local else []), "-h", "-r", "--states=all", which,
            "-O", sp.SQUEUE_FIELDS]


def sacct_argv(refs: Sequence[str]) -> list[str]:
    """The poll's one sacct, for the jobs of ``refs`` (each base id once)."""
    return ["sacct", "-P", "-n", "-X", f"--jobs={','.join(sp.unique_bases(refs))}",
            "-o", sp.SACCT_FIELDS]


def find_squeue_argv(names: Sequence[str], user: str | None,
                     local: bool = False) -> list[str]:
    argv = ["squeue", *(["--local"] if local else []), "-h", "-r", "--states=all",
            f"--name={','.join(names)}", "-O", sp.SQUEUE_FIELDS]
    return [*argv, f"--user={user}"] if user else argv


def find_sacct_argv(names: Sequence[str], user: str | None) -> list[str]:
    argv = ["sacct", "-P", "-n", "-X", f"--name={','.join(names)}",
            f"--starttime={FIND_WINDOW}", "-o", sp.SACCT_FIELDS]
    return [*argv, f"--user={user}"] if user else argv


def accounting_disabled(stderr: str) -> bool:
    """sacct's stderr says the cluster keeps no accounting."""
    return any(m in stderr for m in NO_ACCOUNTING)


def settle(refs: Sequence[str], live: dict[str, JobInfo], done: dict[str, JobInfo],
           complete: bool) -> dict[str, JobInfo]:
    """One poll's answer: each ref's squeue record, else its sacct record, else UNKNOWN
    when ``complete`` (accounting answered and is caught up); a ref accounting cannot
    tell about yet is left out: no news this poll, never a verdict."""
    out: dict[str, JobInfo] = {}
    for r in refs:
        info = pick(live, r) or pick(done, r)
        if info is None and complete:
            info = JobInfo(ref=r, state=JobState.UNKNOWN)
        if info is not None:
            out[r] = info
    return out


def pick(table: dict[str, JobInfo], ref: str) -> JobInfo | None:
    """``table[ref]`` (``table[ref+0]`` for a heterogeneous job); for an array task
    without its own record, the array's own record ("123"): tasks that never left the
    pending remainder of an array (e.g. cancelled while pending) share its state, and
    sacct/squeue list them only under the array job id."""
    info = table.get(ref)
    if info is not None:
        return info if info.ref == ref else replace(info, ref=ref)
    jid = parse_job_id(ref)
    if str(jid) == jid.base:  # a job by its own id: a het job's leader component
        leader = table.get(str(JobRef(jid.base).component(0)))
        if leader is not None:
            return replace(leader, ref=ref)
    meta = table.get(jid.base) if jid.task is not None else None
    return replace(meta, ref=ref) if meta is not None else None


# ------------------------------------------------------------------------ the poll
class SlurmPoll:
    """The poll and find of ``SlurmBackend``; see the module docstring."""

    def __init__(self, runner: CommandRunner, user: str | None, site: SlurmSite) -> None:
        self.runner = runner
        self.user = user
        self.site = site
        self._pyslurm: PyslurmQuery | None = None
        self._query_chosen = False
        self._user_jobs: list[JobInfo] | None = None
        #: until when (monotonic) a job missing from sacct is no news (``_ended``)
        self._unsettled_until = 0.0
        #: refs cancelled here, and when (monotonic): ``note_cancelled``
        self._cancelled: dict[str, float] = {}

    def user_jobs(self) -> list[JobInfo] | None:
        """Every job (array task) of the user that the last poll's squeue listed, or
        None when there is no user (the poll then lists only dethpc's jobs)."""
        return self._user_jobs

    def note_cancelled(self, refs: Sequence[str]) -> None:
        """``refs`` were cancelled (scancel succeeded): one that squeue no longer lists
        while sacct has no record of it or a PENDING one reads CANCELLED (``_ended``)."""
        now = time.monotonic()
        self._cancelled = {r: t for r, t in self._cancelled.items()
                           if now - t < CANCELLED_MEMORY_S}
        self._cancelled.update(dict.fromkeys(map(str, refs), now))

    def _cancelled_here(self, ref: str) -> bool:
        at = self._cancelled.get(ref)
        return at is not None and time.monotonic() - at < CANCELLED_MEMORY_S

    def poll(self, refs: Sequence[str]) -> dict[str, JobInfo]:
        """One squeue (``--states=all``: also jobs that ended within MinJobAge, with
        their exit code), then one sacct for the refs squeue no longer knows (and one
        sdiag when sacct lacks one of them: ``_ended``). With a user, the squeue lists
        all of that user's jobs, and runs even without refs (it is what ``user_jobs``
        counts). Refs accounting cannot tell about yet are left out (``settle``)."""
        if not refs and self.user is None:
            return {}
        seen = self._squeue(sp.unique_bases(refs))
        if self.user is not None:
            self._user_jobs = seen
        if not refs:
            return {}
        live = {i.ref: i for i in seen}
        need = [r for r in refs if pick(live, r) is None]
        done, complete = self._ended(need) if need else ({}, True)
        return settle(refs, live, done, complete)

    def find(self, names: Sequence[str]) -> list[JobInfo]:
        """Tasks named ``names``: one squeue, plus one sacct over FIND_WINDOW."""
        if not names:
            return []
        argv = find_squeue_argv(names, self.user, self.site.local_only())
        found = {i.ref: i for i in sp.parse_squeue(self.runner.run(argv).stdout)}
        if not self.site.accounting_known_off:
            argv = find_sacct_argv(names, self.user)
            res = self.runner.run(argv, check=False)
            if self._sacct_ok(res):
                for info in sp.parse_sacct(res.stdout):
                    found.setdefault(info.ref, info)
                names_seen = {i.name for i in found.values()}
                if set(names) - names_seen and self._dbd_backlog():
                    # a job that ended while slurmdbd was away is not in sacct yet:
                    # "not found" would make the caller submit it a second time
                    raise CommandError(
                        argv, res.returncode, res.stdout,
                        "slurmctld has not yet sent slurmdbd every accounting record "
                        "(sdiag: DBD agent queue); looking again on the next tick",
                        reason="cannot tell yet")
        return sorted(found.values(), key=lambda i: sort_key(i.ref))

    def _ended(self, refs: list[str]) -> tuple[dict[str, JobInfo], bool]:
        """sacct's records of ``refs`` (jobs squeue no longer lists), and whether a ref
        missing from them is truly unknown. Not when sacct fails (slurmdbd down) or
        slurmctld still holds accounting records slurmdbd has not taken (``sdiag``'s
        DBD agent queue, asked only when a ref is missing), nor for ``SETTLE_S`` after
        either was last seen: then ``sacct`` cannot tell yet, and a job that ended while
        the daemon was away must not read as lost."""
        try:
            done = self._sacct(refs)
        except CommandError as exc:
            self._unsettled_until = time.monotonic() + SETTLE_S
            log.warning("sacct failed (%s): %d job(s) that left the queue wait for "
                        "accounting", (exc.stderr.strip().splitlines() or [str(exc)])[-1],
                        len(refs))
            return {}, False
        if self._cancelled:
            for r in refs:
                info = pick(done, r)
                if (info is None or info.state is JobState.PENDING) \
                        and self._cancelled_here(r):
                    # gone from the queue after our scancel: sacct's PENDING is stale,
                    # and a pending task cancelled never gets a record of its own
                    done[r] = JobInfo(ref=r, state=JobState.CANCELLED, raw_state="CANCELLED",
                                      reason=CANCELLED_PENDING)
        if self.site.accounting_known_off or all(pick(done, r) is not None for r in refs):
            return done, True
        backlog = self._dbd_backlog()
        if backlog:
            self._unsettled_until = time.monotonic() + SETTLE_S
            log.info("slurmctld holds %d accounting record(s) slurmdbd has not taken: jobs "
                     "missing from sacct wait", backlog)
        return done, time.monotonic() >= self._unsettled_until

    def _dbd_backlog(self) -> int:
        """Accounting records slurmctld has queued for slurmdbd (one ``sdiag``); 0 when
        sdiag does not say (then sacct's silence about a job is believed)."""
        res = self.runner.run(["sdiag"], check=False)
        backlog = sp.parse_dbd_backlog(res.stdout) if res.returncode == 0 else None
        if backlog is None:
            log.warning("sdiag did not report the DBD agent queue (exit %s): a job missing "
                        "from sacct reads as unknown", res.returncode)
        return backlog or 0

    def _squeue(self, bases: list[str]) -> list[JobInfo]:
        query = self._query()
        if query is not None:
            pacer = self.runner.pacer  # in-process: the runner does not see it
            if pacer is None:
                return query.live_jobs(bases, user=self.user)
            pacer.before(PYSLURM_LOAD)
            started = time.monotonic()
            try:
                return query.live_jobs(bases, user=self.user)
            finally:
                pacer.after(PYSLURM_LOAD, time.monotonic() - started)
        res = self.runner.run(squeue_argv(bases, self.user, self.site.local_only()),
                              check=False)
        if res.returncode != 0:
            if any(m in res.stderr for m in GONE):
                return []  # a single unknown id: nothing of it is in the queue
            raise CommandError(res.argv, res.returncode, res.stdout, res.stderr)
        return sp.parse_squeue(res.stdout)

    def _sacct(self, refs: list[str]) -> dict[str, JobInfo]:
        if self.site.accounting_known_off:  # known already: costs no extra command
            return {}
        res = self.runner.run(sacct_argv(refs), check=False)
        if not self._sacct_ok(res):
            return {}
        return {i.ref: i for i in sp.parse_sacct(res.stdout)}

    def _sacct_ok(self, res: CommandResult) -> bool:
        if res.returncode == 0:
            return True
        if accounting_disabled(res.stderr):
            self.site.no_accounting()
            log.warning("sacct is unavailable (%s): finished jobs will read UNKNOWN and "
                        "dethpc relies on the jobs' exit records", res.stderr.strip()[:200])
            return False
        raise CommandError(res.argv, res.returncode, res.stdout, res.stderr)

    def _query(self) -> PyslurmQuery | None:
        """The pyslurm query object when a matching pyslurm is importable, else None."""
        if not self._query_chosen:
            self._query_chosen = True
            # only with pyslurm installed and of the running Slurm's version (its package
            # metadata: nothing imported yet); then a child imports it first, since
            # libslurm may exit the importing process, and only then this process
            have = installed_version()
            if have is not None:
                version = sp.parse_version(
                    self.runner.run(["scontrol", "--version"], check=False).stdout)
                if versions_match(have, version):
                    probe = self.runner.run(probe_argv(), check=False, retry=False)
                    if probed_version(probe.returncode, probe.stdout, probe.stderr):
                        self._pyslurm = load_query(version)
            log.info("slurm backend: polling with %s",
                     "pyslurm" if self._pyslurm is not None else "the Slurm CLI (squeue/sacct)")
        return self._pyslurm
