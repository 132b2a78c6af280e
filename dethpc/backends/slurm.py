"""The Slurm backend: jobs go to slurmctld through the Slurm CLI (or pyslurm for polls).

Owns: ``SlurmBackend`` — which Slurm command each ``Backend`` operation runs,
with what arguments, and how its errors are read. Every operation is O(1)
commands whatever the number of refs: ``submit`` one ``sbatch``, ``poll`` one
``squeue`` plus at most one ``sacct`` (and one ``sdiag`` when sacct lacks a job
that left the queue), ``cancel`` one ``scancel``, ``requeue``
one ``scontrol requeue``; cluster facts (``scontrol show config``, ``sinfo``,
QoS list, the user's per-user limits: two ``sacctmgr``) are fetched once per
instance and cached (the limits read again a minute after sacctmgr failed). With
a ``user``, the poll's one squeue lists all of that user's jobs (``--user``, not
``--jobs``): the same one RPC, and what per-user limits count (``user_jobs``).
Must not: parse text itself (``slurm_parse`` does), run commands except
through the ``CommandRunner`` it was given, or loop per job.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dethpc.backends import slurm_limits as sl
from dethpc.backends import slurm_parse as sp
from dethpc.backends.base import UNLIMITED, JobInfo, JobRequest, JobState, PoolLimits
from dethpc.backends.limits import limit_refusal
from dethpc.backends.pyslurm_query import PyslurmQuery, load_query, pyslurm_importable
from dethpc.common.errors import CommandError, SubmitError, SubmitLimitError
from dethpc.common.runner import CommandResult, CommandRunner
from dethpc.common.traits import SLURM, BackendTraits

log = logging.getLogger(__name__)

#: stderr of a query or action on a job slurmctld no longer knows
_GONE = ("Invalid job id specified",)
#: stderr of scancel/scontrol on jobs that are finishing, finished or not started
_HARMLESS = (*_GONE, "already completing or completed", "Job is pending execution",
             "Job has already finished", "Requested operation is presently disabled")
#: stderr of sacct on a cluster without accounting
_NO_ACCOUNTING = ("accounting storage is disabled",)
#: how far back ``find`` looks in accounting
FIND_WINDOW = "now-14days"
#: seconds between reads of the user's limits while sacctmgr fails (slurmdbd away)
LIMITS_RETRY_S = 60.0
#: how long ``judge`` asks again while nodes have not registered with slurmctld
REGISTER_WAIT_S = 15.0
#: seconds after sacct last failed, or slurmctld last held unsent accounting records,
#: during which a job missing from sacct is still no news: sdiag's queue reads 0 while
#: the last records are in flight to slurmdbd (a probe saw one such poll)
SETTLE_S = 10.0


class SlurmBackend:
    """``Backend`` over the Slurm CLI; see the module docstring."""

    name = "slurm"
    traits: BackendTraits = SLURM

    def __init__(self, runner: CommandRunner, user: str | None = None,
                 signal_flags: Sequence[str] = ()) -> None:
        self.runner = runner
        self.user = user
        #: extra scancel flags with a signal, e.g. ("--batch",) or ("--full",)
        self.signal_flags = tuple(signal_flags)
        self._config: dict[str, str] | None = None
        self._partitions: dict[str, sp.Partition] | None = None
        self._qos: set[str] | None = None
        self._accounting: bool | None = None
        self._pyslurm: PyslurmQuery | None = None
        self._query_chosen = False
        self._assocs: sl.UserAssocs | None = None
        self._qos_limits: dict[str, sl.QosLimits] = {}
        #: the user's limits were read (or there are none to read): kept for the
        #: daemon's life; until then, read again at most every ``limits_retry_s``
        self._limits_read = False
        self._limits_tried_at: float | None = None
        self.limits_retry_s = LIMITS_RETRY_S
        self._user_jobs: list[JobInfo] | None = None
        #: until when (monotonic) a job missing from sacct is no news (``_ended``)
        self._unsettled_until = 0.0

    # ------------------------------------------------------------ discovery
    def available(self) -> bool:
        if shutil.which("sbatch") is None:
            return False
        try:
            out = self.runner.run(["scontrol", "ping"], check=False, retry=False)
        except CommandError:
            return False
        return " is UP" in out.stdout

    def config(self) -> dict[str, str]:
        """``scontrol show config`` as a dict, fetched once."""
        if self._config is None:
            self._config = sp.parse_key_values(
                self.runner.run(["scontrol", "show", "config"]).stdout)
        return self._config

    def max_array_size(self) -> int:
        value = self.config().get("MaxArraySize", "1001")
        return int(value) if value.isdigit() else 1001

    def accounting_enabled(self) -> bool:
        """True unless ``AccountingStorageType`` is none (or sacct said so)."""
        if self._accounting is None:
            kind = self.config().get("AccountingStorageType", "")
            self._accounting = bool(kind) and not kind.endswith("/none")
        return self._accounting

    def partitions(self) -> dict[str, sp.Partition]:
        if self._partitions is None:
            out = self.runner.run(["sinfo", "-h", "-o", sp.SINFO_FORMAT]).stdout
            self._partitions = sp.parse_sinfo(out)
        return self._partitions

    def check_pool(self, partition: str | None, qos: str | None, nodes: int,
                   tasks_per_node: int, gpus_per_node: int) -> None:
        parts = self.partitions()
        if partition is not None:
            if partition not in parts:
                raise SubmitError(
                    f"partition {partition!r} does not exist on this cluster; existing "
                    f"partitions: {', '.join(sorted(parts)) or '(none)'}. Fix the resource "
                    "pool's `partition` in the cluster config.")
            _check_fit(parts[partition], nodes, tasks_per_node, gpus_per_node)
        if qos is not None and self.accounting_enabled():
            known = self._qos_names()
            if qos not in known:
                raise SubmitError(f"QoS {qos!r} does not exist; existing QoS: "
                                  f"{', '.join(sorted(known))}. Fix the pool's `qos`.")

    def _qos_names(self) -> set[str]:
        if self._qos is None:
            out = self.runner.run(["sacctmgr", "-n", "-P", "show", "qos", "format=name"])
            self._qos = {line.strip() for line in out.stdout.splitlines() if line.strip()}
        return self._qos

    def job_limits(self, partition: str | None, qos: str | None, account: str | None,
                   extra_args: Sequence[str] = ()) -> PoolLimits:
        """The user's per-user limits for jobs of this partition/QoS/account: two
        sacctmgr commands on the first call, none after. No user or no accounting: no
        limits. sacctmgr failing (slurmdbd away): no limits for now (sbatch refusals
        are still waited out), and the two commands again ``limits_retry_s`` later."""
        now = time.monotonic()
        if not self._limits_read and (self._limits_tried_at is None
                                      or now - self._limits_tried_at >= self.limits_retry_s):
            self._limits_tried_at = now
            if self.user is None or not self.accounting_enabled():
                self._limits_read = True          # nothing to read
            else:
                try:
                    self._assocs = sl.parse_user_assocs(
                        self.runner.run(sl.user_argv(self.user)).stdout, self.user)
                    self._qos_limits = sl.parse_qos_limits(
                        self.runner.run(sl.QOS_ARGV).stdout)
                    self._limits_read = True
                except CommandError as exc:
                    log.warning("cannot read %s's job limits (%s): submitting without "
                                "counting for now (Slurm's refusals are waited out); "
                                "reading them again in %.0f s", self.user, exc,
                                self.limits_retry_s)
                    self._assocs = None
        if self._assocs is None:
            return UNLIMITED
        return sl.pool_limits(self._assocs, self._qos_limits, partition=partition, qos=qos,
                              account=account, extra_args=extra_args)

    def user_jobs(self) -> list[JobInfo] | None:
        """Every job (array task) of the user that the last poll's squeue listed, or
        None when this backend has no user (its poll then lists only dethpc's jobs)."""
        return self._user_jobs

    # --------------------------------------------------------------- submit
    def _sbatch_argv(self, request: JobRequest, mode: str) -> list[str]:
        """``sbatch <mode> ...`` for ``request`` (``--parsable`` or ``--test-only``)."""
        argv = ["sbatch", mode, f"--chdir={Path(request.workdir)}",
                f"--job-name={request.name}", f"--comment={request.comment}"]
        indices = sorted(set(request.array_indices))
        if indices:
            limit = self.max_array_size()
            if indices[-1] >= limit:
                raise SubmitError(f"array index {indices[-1]} is above this cluster's "
                                  f"MaxArraySize-1 ({limit - 1}); submit smaller batches")
            argv.append(f"--array={sp.format_array(indices, request.throttle)}")
        return [*argv, *_export_arg(request), *request.extra_args, str(request.script)]

    def judge(self, request: JobRequest) -> str | None:
        """Slurm's verdict on ``request`` without submitting it: one ``sbatch
        --test-only``. None when Slurm would take the job, else Slurm's own words.
        A refusal while some node's state is UNKNOWN (slurmctld just restarted, its
        slurmd not registered yet: for about 4 s here every job is refused with
        "Requested node configuration is not available") is asked again, for at most
        ``REGISTER_WAIT_S``, before it is believed (one sinfo per refusal)."""
        deadline = time.monotonic() + REGISTER_WAIT_S
        while True:
            res = self.runner.run(self._sbatch_argv(request, "--test-only"), check=False,
                                  retry=False)
            if res.returncode == 0:
                return None
            if time.monotonic() >= deadline or not self._nodes_registering():
                return sp.sbatch_refusal(res.stderr)
            time.sleep(0.5)

    def _nodes_registering(self) -> bool:
        res = self.runner.run(["sinfo", "-h", "-N", "-o", "%T"], check=False, retry=False)
        return res.returncode == 0 and sp.nodes_registering(res.stdout)

    def submit(self, request: JobRequest) -> list[str]:
        argv = self._sbatch_argv(request, "--parsable")
        indices = sorted(set(request.array_indices))
        try:
            res = self.runner.run(argv, retry=False)  # a retried sbatch may submit twice
        except CommandError as exc:
            raise _submit_error(exc) from exc
        job = sp.parse_sbatch_parsable(res.stdout)
        return [f"{job}_{i}" for i in indices] if indices else [job]

    # ----------------------------------------------------------------- poll
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
        need = [r for r in refs if _pick(live, r) is None]
        done, complete = self._ended(need) if need else ({}, True)
        return settle(refs, live, done, complete)

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
        if self._accounting is False or all(_pick(done, r) is not None for r in refs):
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
            return query.live_jobs(bases, user=self.user)
        which = f"--user={self.user}" if self.user is not None else f"--jobs={','.join(bases)}"
        res = self.runner.run(["squeue", "-h", "-r", "--states=all", which,
                               "-O", sp.SQUEUE_FIELDS], check=False)
        if res.returncode != 0:
            if any(m in res.stderr for m in _GONE):
                return []  # a single unknown id: nothing of it is in the queue
            raise CommandError(res.argv, res.returncode, res.stdout, res.stderr)
        return sp.parse_squeue(res.stdout)

    def _sacct(self, refs: list[str]) -> dict[str, JobInfo]:
        if self._accounting is False:  # learnt from sacct itself: costs no extra command
            return {}
        jobs = ",".join(sp.unique_bases(refs))
        res = self.runner.run(["sacct", "-P", "-n", "-X", f"--jobs={jobs}",
                               "-o", sp.SACCT_FIELDS], check=False)
        if not self._sacct_ok(res):
            return {}
        return {i.ref: i for i in sp.parse_sacct(res.stdout)}

    def _sacct_ok(self, res: CommandResult) -> bool:
        if res.returncode == 0:
            return True
        if any(m in res.stderr for m in _NO_ACCOUNTING):
            self._accounting = False
            log.warning("sacct is unavailable (%s): finished jobs will read UNKNOWN and "
                        "dethpc relies on the jobs' exit records", res.stderr.strip()[:200])
            return False
        raise CommandError(res.argv, res.returncode, res.stdout, res.stderr)

    def _query(self) -> PyslurmQuery | None:
        """The pyslurm query object when a matching pyslurm is importable, else None."""
        if not self._query_chosen:
            self._query_chosen = True
            if pyslurm_importable():  # only then is the running Slurm's version needed
                version = sp.parse_version(
                    self.runner.run(["scontrol", "--version"], check=False).stdout)
                self._pyslurm = load_query(version)
            log.info("slurm backend: polling with %s",
                     "pyslurm" if self._pyslurm is not None else "the Slurm CLI (squeue/sacct)")
        return self._pyslurm

    # ----------------------------------------------------------------- find
    def find(self, names: Sequence[str]) -> list[JobInfo]:
        """Tasks named ``names``: one squeue, plus one sacct over FIND_WINDOW."""
        if not names:
            return []
        joined = ",".join(names)
        argv = ["squeue", "-h", "-r", "--states=all", f"--name={joined}", "-O", sp.SQUEUE_FIELDS]
        if self.user:
            argv.append(f"--user={self.user}")
        found = {i.ref: i for i in sp.parse_squeue(self.runner.run(argv).stdout)}
        if self._accounting is not False:
            argv = ["sacct", "-P", "-n", "-X", f"--name={joined}",
                    f"--starttime={FIND_WINDOW}", "-o", sp.SACCT_FIELDS]
            if self.user:
                argv.append(f"--user={self.user}")
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
        return sorted(found.values(), key=lambda i: _ref_key(i.ref))

    # -------------------------------------------------------------- actions
    def cancel(self, refs: Sequence[str], signal: str | None = None) -> None:
        if not refs:
            return
        argv = ["scancel"]
        if signal is not None:
            argv += [f"--signal={signal}", *self.signal_flags]
        self._tolerant(argv + list(refs))

    def requeue(self, refs: Sequence[str]) -> None:
        if refs:
            self._tolerant(["scontrol", "requeue", ",".join(refs)])

    def set_throttle(self, array_job_id: str, limit: int) -> None:
        self._tolerant(["scontrol", "update", f"JobId={array_job_id}",
                        f"ArrayTaskThrottle={max(0, limit)}"])

    def _tolerant(self, argv: list[str]) -> None:
        """Run an action; errors about finished or unknown jobs are not failures."""
        res = self.runner.run(argv, check=False)
        if res.returncode == 0:
            return
        errors = [ln for ln in res.stderr.splitlines() if ln.strip()]
        if errors and all(any(m in ln for m in _HARMLESS) for ln in errors):
            log.info("`%s`: %s", " ".join(argv[:2]), "; ".join(errors)[:300])
            return
        raise CommandError(res.argv, res.returncode, res.stdout, res.stderr)


# ------------------------------------------------------------------ helpers
def settle(refs: Sequence[str], live: dict[str, JobInfo], done: dict[str, JobInfo],
           complete: bool) -> dict[str, JobInfo]:
    """One poll's answer: each ref's squeue record, else its sacct record, else UNKNOWN
    when ``complete`` (accounting answered and is caught up); a ref accounting cannot
    tell about yet is left out: no news this poll, never a verdict."""
    out: dict[str, JobInfo] = {}
    for r in refs:
        info = _pick(live, r) or _pick(done, r)
        if info is None and complete:
            info = JobInfo(ref=r, state=JobState.UNKNOWN)
        if info is not None:
            out[r] = info
    return out


def _pick(table: dict[str, JobInfo], ref: str) -> JobInfo | None:
    """``table[ref]`` (``table[ref+0]`` for a heterogeneous job); for an array task
    without its own record, the array's own record ("123"): tasks that never left the
    pending remainder of an array (e.g. cancelled while pending) share its state, and
    sacct/squeue list them
    only under the array job id."""
    info = table.get(ref) or table.get(f"{ref}+0")  # a het job: its leader component
    if info is not None:
        return info if info.ref == ref else replace(info, ref=ref)
    jid = sp.parse_job_id(ref)
    meta = table.get(jid.base) if jid.task is not None else None
    return replace(meta, ref=ref) if meta is not None else None


def _check_fit(part: sp.Partition, nodes: int, tasks_per_node: int, gpus_per_node: int) -> None:
    fitting = part.nodes_fitting(cpus=tasks_per_node, gpus=gpus_per_node)
    if fitting >= nodes:
        return
    shape = ", ".join(f"{g.count}x({g.cpus} CPUs, {g.gpus} GPUs)" for g in part.groups)
    raise SubmitError(
        f"partition {part.name!r} cannot fit {nodes} node(s) x {tasks_per_node} task(s) "
        f"with {gpus_per_node} GPU(s) each: it has {shape or 'no nodes'}. Ask for fewer "
        "slots per trial, or use a pool on a bigger partition.")


def _export_arg(request: JobRequest) -> list[str]:
    if not request.env:
        return []
    for key, value in request.env.items():
        if "," in value or "," in key:
            raise SubmitError(f"environment variable {key} has a comma, which sbatch "
                              "--export cannot carry; set it in the job script instead")
    return ["--export=ALL," + ",".join(f"{k}={v}" for k, v in request.env.items())]


def _submit_error(exc: CommandError) -> Exception:
    text = exc.stderr
    word = limit_refusal(text)
    if word is not None:
        return SubmitLimitError(word, text.strip())
    if "invalid partition" in text.lower() or "Invalid qos" in text or "Invalid account" in text:
        return SubmitError(f"sbatch refused the job: {text.strip()}")
    if "Requested node configuration is not available" in text:
        return SubmitError(f"sbatch refused the job: {text.strip()} (the allocation cannot fit "
                           "the partition's nodes)")
    return exc


def _ref_key(ref: str) -> tuple[int, int]:
    jid = sp.parse_job_id(ref)
    return int(jid.base), jid.task if jid.task is not None else -1
