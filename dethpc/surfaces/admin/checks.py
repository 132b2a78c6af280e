"""The checks of ``dethpc admin check``: cluster config + live facts -> findings.

Owns: ``Finding`` / ``Severity``, ``check_cluster`` (every check, per pool and
for the cluster as a whole, each finding with the fix), ``store_finding`` (where the
users' state database lives: a SQLite file on a network filesystem) and ``exit_code``
(1 with errors; warnings alone are 0). What each check compares and why is
said where it is made; docs/admin.md lists them for admins.
Must not: run commands or read files (``dethpc.surfaces.admin.facts`` gathers the facts):
every function here is a pure function of its arguments, tested by tables in
tests/unit/surfaces/test_admin_check.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from dethpc.backends.base import PoolLimits
from dethpc.backends.slurm_limits import Assoc, QosLimits, UserAssocs, pool_limits
from dethpc.common.errors import SubmitError
from dethpc.common.sbatch_options import parse_time
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.jobs.allocation import mem_per_node_mb
from dethpc.surfaces.admin.facts import (
    AssocFacts,
    ClusterFacts,
    NodeFacts,
    PartitionFacts,
    QosFacts,
)

if TYPE_CHECKING:  # a type only: importing the store package would load SQLAlchemy
    from dethpc.store.location import StoreLocation


class Severity(StrEnum):
    ERROR = "error"      # dethpc's jobs are refused or can never run
    WARNING = "warning"  # they run, at a cost the admin should know
    OK = "ok"            # checked and fine (shown with --verbose and in --json)


@dataclass(frozen=True)
class Finding:
    severity: Severity
    #: the pool it is about; "" = the cluster as a whole
    pool: str
    #: what was checked, e.g. "partition", "gres", "preempt.mode"
    check: str
    message: str
    #: what to change (cluster config field or Slurm setting); "" for OK findings
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        data = asdict(self)
        data["severity"] = self.severity.value
        return data


def exit_code(findings: Iterable[Finding]) -> int:
    return 1 if any(f.severity is Severity.ERROR for f in findings) else 0


def check_cluster(cfg: ClusterConfig, facts: ClusterFacts,
                  pools: Sequence[str] | None = None) -> list[Finding]:
    """Every finding for the pools named (default: all) and the cluster itself."""
    out = _cluster_findings(facts)
    for name, pool in cfg.pools.items():
        if pools is None or name in pools:
            out += check_pool(pool, facts)
    return out


# ------------------------------------------------------------------- cluster
def _cluster_findings(facts: ClusterFacts) -> list[Finding]:
    out = [_max_array_size(facts.config.get("MaxArraySize", "1001"))]
    if not facts.accounting:
        out.append(Finding(
            Severity.WARNING, "", "accounting",
            "AccountingStorageType is none: QoS, accounts, associations and per-user limits "
            "cannot be checked, and sacct cannot tell dethpc how finished jobs ended (it then "
            "relies on the jobs' exit records alone)",
            "configure slurmdbd (AccountingStorageType=accounting_storage/slurmdbd)"))
    elif facts.accounting_problem:
        out.append(Finding(Severity.WARNING, "", "accounting",
                           f"cannot read accounting: {facts.accounting_problem}; QoS, accounts "
                           "and limits were not checked", "make sacctmgr work for this user"))
    else:
        enforce = facts.config.get("AccountingStorageEnforce", "none")
        out.append(Finding(Severity.OK, "", "accounting",
                           f"accounting on (AccountingStorageEnforce={enforce})"))
    return out


def _max_array_size(value: str) -> Finding:
    size = int(value) if value.strip().isdigit() else 1001
    if size == 0:
        return Finding(Severity.ERROR, "", "max_array_size",
                       "MaxArraySize=0: job arrays are disabled, and dethpc submits trials "
                       "as job arrays", "set MaxArraySize (Slurm's default is 1001) in slurm.conf")
    if size == 1:
        return Finding(Severity.WARNING, "", "max_array_size",
                       "MaxArraySize=1: only index 0 is allowed, so every trial is its own "
                       "sbatch (one RPC per trial instead of one per batch)",
                       "raise MaxArraySize in slurm.conf (Slurm's default is 1001)")
    return Finding(Severity.OK, "", "max_array_size",
                   f"MaxArraySize={size}: dethpc splits trials into arrays of at most {size}")


# ---------------------------------------------------------------------- store
def store_finding(cfg: ClusterConfig, loc: StoreLocation | None) -> Finding:
    """Where the users' state database is, for the site: ``loc`` is what the config's
    ``database_url`` (else the default SQLite file in ``DETHPC_HOME``, here the checking
    user's) points at; None when each user names theirs in ``database_url_file``. A SQLite
    file on a network filesystem is a warning: SQLite's locking is unreliable there and
    every login node that mounts it may open it."""
    if loc is None:
        return Finding(Severity.OK, "", "store",
                       f"each user's database URL is read from database_url_file "
                       f"({cfg.database_url_file})")
    if loc.path is None:
        return Finding(Severity.OK, "", "store", f"shared database: {loc.url}")
    which = "database_url's SQLite file" if cfg.database_url else \
        "no database_url: each user's default store, SQLite in their DETHPC_HOME (here"
    which += f" {loc.path}" + ("" if cfg.database_url else ")")
    if loc.mount is None:
        return Finding(Severity.WARNING, "", "store",
                       f"{which}: its filesystem could not be told (no /proc/self/mountinfo)",
                       "keep SQLite on a login node's local disk, or set database_url")
    m = loc.mount
    if not m.network:
        return Finding(Severity.OK, "", "store",
                       f"{which} is on {m.fstype} at {m.mount_point}: local, safe for SQLite")
    return Finding(
        Severity.WARNING, "", "store",
        f"{which} is on {m.fstype} ({m.source} mounted at {m.mount_point}), a network "
        "filesystem: SQLite's locking is unreliable there and dethpc on several login nodes "
        "may open the same file (dethpc tells each user this once)",
        "give the users a PostgreSQL database: database_url or database_url_file in the "
        "cluster config (docs/admin.md#a-shared-postgresql-database); or have each user set "
        "DETHPC_HOME on one login node's local disk, keep runs_root on the shared "
        "filesystem, and use that node only (dethpc --remote from elsewhere)")


# ---------------------------------------------------------------------- pools
@dataclass(frozen=True)
class _Scope:
    """One pool with the live objects it maps to."""

    pool: ResourcePool
    facts: ClusterFacts
    part: PartitionFacts
    nodes: tuple[NodeFacts, ...]

    def field(self, key: str) -> str:
        return f"pools.{self.pool.name}.{key}"

    def finding(self, severity: Severity, check: str, message: str, fix: str = "") -> Finding:
        return Finding(severity, self.pool.name, check, message, fix)


def check_pool(pool: ResourcePool, facts: ClusterFacts) -> list[Finding]:
    """Every finding for one pool. Without its partition nothing else can be judged;
    a partition that is not UP (or has no usable node) is an error, and the other
    checks still run."""
    part, out = _partition(pool, facts)
    if part is None:
        return out
    nodes = tuple(n for n in facts.nodes if part.name in n.partitions)
    scope = _Scope(pool, facts, part, nodes)
    out += _accounting(scope) + _gres(scope) + _fit(scope) + _time(scope)
    if pool.preemptible:
        out += _preemption(scope)
    return out


def _partition(pool: ResourcePool, facts: ClusterFacts
               ) -> tuple[PartitionFacts | None, list[Finding]]:
    key = f"pools.{pool.name}.partition"
    existing = ", ".join(sorted(facts.partitions)) or "(none)"

    def finding(severity: Severity, message: str, fix: str = "") -> Finding:
        return Finding(severity, pool.name, "partition", message, fix)

    if pool.partition is None:
        default = [p for p in facts.partitions.values() if p.default]
        if not default:
            return None, [finding(Severity.ERROR, "no partition is set and the cluster has no "
                                  "default partition", f"set {key} to one of: {existing}")]
        part = default[0]
    elif pool.partition not in facts.partitions:
        return None, [finding(Severity.ERROR, f"partition {pool.partition!r} does not exist",
                              f"set {key} to one of: {existing}")]
    else:
        part = facts.partitions[pool.partition]
    if part.state != "UP":
        what = {"DOWN": "queues jobs but starts none", "DRAIN": "refuses new jobs",
                "INACTIVE": "refuses new jobs and starts none"}.get(part.state, "is not UP")
        return part, [finding(Severity.ERROR, f"partition {part.name} is {part.state}: it {what}",
                              f"scontrol update PartitionName={part.name} State=UP (once it "
                              f"should run jobs again), or point {key} at another partition")]
    usable = [n for n in facts.nodes if part.name in n.partitions and n.usable]
    if not usable:
        return part, [finding(Severity.ERROR, f"partition {part.name} is UP but none of its "
                              f"nodes ({part.nodes or 'none'}) takes jobs",
                              "resume or add nodes (scontrol update NodeName=... State=RESUME)")]
    how = "the default partition" if pool.partition is None else "partition"
    return part, [finding(Severity.OK, f"{how} {part.name} is UP with {len(usable)} usable "
                          f"node(s)")]


# ------------------------------------------------------------------ accounting
def _accounting(s: _Scope) -> list[Finding]:
    f = s.facts
    if not f.accounting or f.qos is None or f.assocs is None or f.accounts is None:
        return []
    out: list[Finding] = []
    pool, part = s.pool, s.part
    if pool.qos is not None:
        if pool.qos not in f.qos:
            out.append(s.finding(Severity.ERROR, "qos", f"QoS {pool.qos!r} does not exist",
                                 f"set {s.field('qos')} to one of: {', '.join(sorted(f.qos))}, "
                                 f"or create it (sacctmgr add qos {pool.qos})"))
        elif not _allowed(pool.qos, part.allow_qos, part.deny_qos):
            out.append(s.finding(Severity.ERROR, "qos",
                                 f"partition {part.name} does not allow QoS {pool.qos} "
                                 f"(AllowQos={','.join(part.allow_qos or ('ALL',))}, "
                                 f"DenyQos={','.join(part.deny_qos) or 'none'})",
                                 f"add it to the partition's AllowQos or change {s.field('qos')}"))
    account = pool.account or f.default_account
    if pool.account is not None and pool.account not in f.accounts:
        return [*out, s.finding(Severity.ERROR, "account",
                                f"account {pool.account!r} does not exist",
                                f"set {s.field('account')} to one of the user's accounts "
                                f"({_accounts(f.assocs)}), or create it "
                                f"(sacctmgr add account {pool.account})")]
    if account is not None and not _allowed(account, part.allow_accounts, part.deny_accounts):
        out.append(s.finding(Severity.ERROR, "account",
                             f"partition {part.name} does not allow account {account}",
                             f"add it to the partition's AllowAccounts or change "
                             f"{s.field('account')}"))
    assoc = _association(f.assocs, account, part.name)
    if assoc is None:
        sev = Severity.ERROR if f.enforce("associations") else Severity.WARNING
        which = f"account {account}" if account else "any account (and no default account)"
        return [*out, s.finding(sev, "association",
                                f"user {f.user} has no association with {which} on cluster "
                                f"{f.cluster_name or '?'} for partition {part.name}",
                                f"sacctmgr add user {f.user} account={account or '<account>'}"
                                + (f" (or set {s.field('account')} to one of: "
                                   f"{_accounts(f.assocs)})" if f.assocs else ""))]
    limits = _pool_limits(s)
    qos = limits.qos
    if pool.qos is not None and pool.qos in f.qos and assoc.qos and pool.qos not in assoc.qos:
        sev = Severity.ERROR if f.enforce("qos") else Severity.WARNING
        out.append(s.finding(sev, "association",
                             f"user {f.user} in account {assoc.account} may not use QoS "
                             f"{pool.qos} (allowed: {', '.join(assoc.qos)})",
                             f"sacctmgr modify user {f.user} where account={assoc.account} set "
                             f"qos+={pool.qos} (or set {s.field('qos')} to one of those)"))
    else:
        out.append(s.finding(Severity.OK, "association",
                             f"user {f.user} may submit with account {assoc.account}"
                             + (f" and QoS {qos}" if qos else "")))
    out.append(_limits(s, limits))
    return out


def _allowed(name: str, allow: tuple[str, ...] | None, deny: tuple[str, ...]) -> bool:
    return (allow is None or name in allow) and name not in deny


def _accounts(assocs: Sequence[AssocFacts]) -> str:
    return ", ".join(sorted({a.account for a in assocs})) or "none"


def _association(assocs: Sequence[AssocFacts], account: str | None,
                 partition: str) -> AssocFacts | None:
    """The user's association Slurm would use: the account's partition-specific one
    first, then its cluster-wide one."""
    mine = [a for a in assocs if account is None or a.account == account]
    for a in sorted(mine, key=lambda a: a.partition is None):
        if a.partition in (None, partition):
            return a
    return None


def _pool_limits(s: _Scope) -> PoolLimits:
    """The QoS, account and per-user limits the pool's jobs fall under, by the daemon's
    own rule (``dethpc.backends.slurm_limits.pool_limits``), so that what admin check
    reports is what the daemon plans with."""
    f = s.facts
    user = UserAssocs(f.user, f.default_account or "", tuple(
        Assoc(a.account, a.partition or "", a.qos, a.default_qos or "", a.max_submit,
              a.max_jobs) for a in f.assocs or ()))
    table = {name: QosLimits(q.max_submit_per_user, q.max_jobs_per_user)
             for name, q in (f.qos or {}).items()}
    return pool_limits(user, table, partition=s.part.name, qos=s.pool.qos,
                       account=s.pool.account, extra_args=s.pool.sbatch_args)


def _limits(s: _Scope, limits: PoolLimits) -> Finding:
    """The user's submit and job limits (QoS per-user limits and association limits)."""
    parts: list[tuple[str, int, str]] = []
    for lim in limits.limits:
        qos = lim.scope == "qos"
        owner = f"QoS {lim.name}" if qos else f"account {lim.name}"
        if lim.max_submit is not None:
            key = "MaxSubmitJobsPerUser" if qos else "MaxSubmitJobs"
            parts.append(("pending+running", lim.max_submit, f"{key} of {owner}"))
        if lim.max_jobs is not None:
            key = "MaxJobsPerUser" if qos else "MaxJobs"
            parts.append(("running", lim.max_jobs, f"{key} of {owner}"))
    if not parts:
        return s.finding(Severity.OK, "limits", f"no per-user job limits for {s.facts.user}")
    text = "; ".join(f"at most {n} job(s) {what} ({why})" for what, n, why in parts)
    if not s.facts.enforce("limits"):
        return s.finding(Severity.OK, "limits",
                         f"limits set but not enforced (AccountingStorageEnforce lacks "
                         f"'limits'): {text}")
    running = min((n for what, n, _ in parts if what == "running"), default=None)
    queued = limits.max_submit
    pace = f"; at most {running} of them run at once" if running else ""
    return s.finding(Severity.WARNING, "limits",
                     f"user {s.facts.user}: {text}. Every array task counts as one job; "
                     + (f"dethpc keeps at most {queued} in the queue and submits the rest "
                        f"later" if queued is not None else "dethpc's pending jobs wait")
                     + pace,
                     f"nothing to fix if this pace is intended; else raise the limits "
                     f"(sacctmgr modify qos ...) or use another {s.field('qos')}")


# ------------------------------------------------------------- gres and fit
def _is_gpu_pool(pool: ResourcePool) -> bool:
    return pool.gres is not None and pool.gres.split(":", 1)[0] == "gpu"


def _gres(s: _Scope) -> list[Finding]:
    pool = s.pool
    if not _is_gpu_pool(pool):
        return []
    if "gpu" not in s.facts.config.get("GresTypes", "").split(","):
        return [s.finding(Severity.ERROR, "gres", "GresTypes does not list gpu: Slurm "
                          "refuses every GPU request", "add GresTypes=gpu to slurm.conf and "
                          "the GPUs to gres.conf and the nodes' Gres=")]
    with_gpus = [n for n in s.nodes if n.gpus() > 0]
    if not with_gpus:
        return [s.finding(Severity.ERROR, "gres", f"no node of partition {s.part.name} has GPUs",
                          f"drop {s.field('gres')} (CPU pool) or use a partition with GPU nodes")]
    types = sorted({t for n in with_gpus for t in n.gpu_types()})
    kind = pool.gpu_type
    if kind is not None and kind not in types:
        return [s.finding(Severity.ERROR, "gres",
                          f"no node of partition {s.part.name} has GPUs of type {kind} "
                          f"(types there: {', '.join(types) or 'untyped'})",
                          f"set {s.field('gpu_type')} to one of: {', '.join(types)}"
                          + (", or drop it" if types else ""))]
    most = max(n.gpus(kind) for n in with_gpus)
    label = f"gpu:{kind}" if kind else "gpu"
    if most < pool.slots_per_node:
        return [s.finding(Severity.ERROR, "gres",
                          f"slots_per_node={pool.slots_per_node} asks {pool.slots_per_node} "
                          f"{label} per node, but nodes of {s.part.name} have at most {most}",
                          f"set {s.field('slots_per_node')} to {most} or fewer")]
    count = sum(1 for n in with_gpus if n.gpus(kind) >= pool.slots_per_node)
    return [s.finding(Severity.OK, "gres", f"{count} node(s) of {s.part.name} have "
                      f">= {pool.slots_per_node} {label}")]


def _fit(s: _Scope) -> list[Finding]:
    """cpus and memory of a full node of the pool (``slots_per_node`` slots) fit a node."""
    pool = s.pool
    cpus = pool.slots_per_node * pool.cpus_per_slot
    try:
        mem = mem_per_node_mb(pool, pool.slots_per_node)
    except SubmitError as exc:
        return [s.finding(Severity.ERROR, "fit", str(exc), f"fix {s.field('mem_per_slot')}")]
    gpus = pool.slots_per_node if _is_gpu_pool(pool) else 0
    nodes = [n for n in s.nodes if n.gpus(pool.gpu_type) >= gpus] if gpus else list(s.nodes)
    if not nodes:
        return []  # the GRES finding already says it
    out: list[Finding] = []
    top_cpus = max(n.cpus for n in nodes)
    if cpus > top_cpus:
        out.append(s.finding(
            Severity.ERROR, "fit",
            f"slots_per_node x cpus_per_slot = {pool.slots_per_node} x {pool.cpus_per_slot} "
            f"= {cpus} CPUs per node, but the largest node has {top_cpus}",
            f"set {s.field('cpus_per_slot')} to {max(top_cpus // pool.slots_per_node, 1)} "
            f"or fewer"))
    top_mem = max(n.memory_mb for n in nodes)
    if mem is not None and mem > top_mem:
        per_slot = top_mem // pool.slots_per_node
        out.append(s.finding(
            Severity.ERROR, "fit",
            f"slots_per_node x mem_per_slot = {pool.slots_per_node} x {pool.mem_per_slot} "
            f"= {mem} MB per node, but the largest node has {top_mem} MB (RealMemory)",
            f"set {s.field('mem_per_slot')} to {per_slot}M or less"))
    if out:
        return out
    fitting = [n for n in nodes if n.cpus >= cpus and (mem is None or n.memory_mb >= mem)]
    what = f"{cpus} CPUs" + (f", {mem} MB" if mem is not None else "") + \
        (f", {gpus} GPUs" if gpus else "")
    if not fitting:
        return [s.finding(Severity.ERROR, "fit", f"no single node offers a full node of this "
                          f"pool ({what}) at once", f"lower {s.field('slots_per_node')}")]
    return [s.finding(Severity.OK, "fit", f"{len(fitting)} node(s) fit a full node of this "
                      f"pool ({what})")]


# ------------------------------------------------------------------------ time
def _time(s: _Scope) -> list[Finding]:
    pool, part = s.pool, s.part
    limit = part.max_time_s
    if pool.default_time is None:
        got = part.default_time_s if part.default_time_s is not None else limit
        shown = "UNLIMITED" if got is None else _hms(got)
        out = [s.finding(Severity.OK, "time", f"no default_time: jobs get the partition's "
                         f"default ({shown})")]
        return out + _grace_vs_time(s, got)
    wanted = parse_time(pool.default_time)
    if limit is not None and (wanted is None or wanted > limit):
        return [s.finding(Severity.ERROR, "time",
                          f"default_time {pool.default_time} is over partition {part.name}'s "
                          f"MaxTime {part.max_time_text}: sbatch refuses such jobs "
                          f"(EnforcePartLimits) or they pend forever (PartitionTimeLimit)",
                          f"set {s.field('default_time')} to {part.max_time_text} or less, "
                          f"or raise MaxTime (scontrol update PartitionName={part.name} "
                          f"MaxTime=...)")]
    return [s.finding(Severity.OK, "time", f"default_time {pool.default_time} fits MaxTime "
                      f"{part.max_time_text}"), *_grace_vs_time(s, wanted)]


def _grace_vs_time(s: _Scope, seconds: int | None) -> list[Finding]:
    if seconds is None or s.pool.signal_grace_s < seconds:
        return []
    return [s.finding(Severity.WARNING, "time",
                      f"signal_grace_s={s.pool.signal_grace_s} is not shorter than the job's "
                      f"time limit ({_hms(seconds)}): the checkpoint signal comes as soon as "
                      f"the job starts", f"lower {s.field('signal_grace_s')} or raise "
                      f"{s.field('default_time')}")]


def _hms(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


# ------------------------------------------------------------------ preemption
def _preemption(s: _Scope) -> list[Finding]:
    config = s.facts.config
    kind = config.get("PreemptType", "preempt/none")
    if kind.endswith("/none"):
        return [s.finding(Severity.WARNING, "preempt.mode",
                          "the pool is preemptible but PreemptType=preempt/none: Slurm never "
                          "preempts its jobs", f"set {s.field('preemptible')} to false, or "
                          "configure PreemptType and PreemptMode=REQUEUE")]
    qos = _pool_qos(s)
    by_qos = kind.endswith("/qos") and qos is not None
    mode = ((qos.preempt_mode if by_qos and qos else None)
            or (config.get("PreemptMode", "OFF") if by_qos else s.part.preempt_mode)).upper()
    where = f"QoS {qos.name}" if by_qos and qos else f"partition {s.part.name}"
    grace = qos.grace_time_s if by_qos and qos else s.part.grace_time_s
    return [_mode(s, mode, where), *_grace(s, grace, where), _user_signal(s)]


def _pool_qos(s: _Scope) -> QosFacts | None:
    name = _pool_limits(s).qos
    return (s.facts.qos or {}).get(name) if name else None


def _mode(s: _Scope, mode: str, where: str) -> Finding:
    words = set(mode.replace("+", ",").split(","))
    fix = f"PreemptMode=REQUEUE on {where}"
    if "REQUEUE" in words:
        return s.finding(Severity.OK, "preempt.mode", f"PreemptMode=REQUEUE on {where}: a "
                         "preempted trial checkpoints and goes back to the queue with its job id")
    if "CANCEL" in words:
        return s.finding(Severity.WARNING, "preempt.mode",
                         f"PreemptMode=CANCEL on {where}: a preempted job ends PREEMPTED "
                         "instead of being requeued. A trial that checkpointed within "
                         "GraceTime requeues itself; otherwise dethpc resubmits it as a new "
                         "job (free, not counted) from its latest checkpoint: the progress "
                         "since that checkpoint is lost and the new job queues again", fix)
    if "SUSPEND" in words:
        return s.finding(Severity.OK, "preempt.mode",
                         f"PreemptMode={mode} on {where}: a preempted trial is suspended in "
                         "place (nothing lost; it keeps its memory while frozen)")
    return s.finding(Severity.WARNING, "preempt.mode",
                     f"PreemptMode={mode} on {where}: its jobs are never preempted, so the "
                     "pool's preemptible: true changes nothing",
                     f"{fix}, or set {s.field('preemptible')} to false")


def _grace(s: _Scope, grace: int, where: str) -> list[Finding]:
    kill_wait = s.facts.config.get("KillWait", "30 sec").split(" ")[0]
    budget = s.pool.signal_grace_s
    if grace == 0:
        return [s.finding(Severity.WARNING, "preempt.grace",
                          f"GraceTime=0 on {where}: a preempted trial gets SIGTERM and "
                          f"KillWait ({kill_wait} s) later SIGKILL; if it cannot checkpoint "
                          "in that time, the work since its last periodic checkpoint is lost "
                          "and the restart is counted", f"GraceTime={max(budget, 1)} (seconds) "
                          f"on {where}")]
    if grace < budget:
        return [s.finding(Severity.WARNING, "preempt.grace",
                          f"GraceTime={grace} s on {where} is shorter than signal_grace_s="
                          f"{budget} s: a preempted trial gets less time to checkpoint than "
                          "the pool allows before a time limit",
                          f"GraceTime={budget} on {where}, or lower "
                          f"{s.field('signal_grace_s')} to {grace} if a checkpoint fits")]
    return [s.finding(Severity.OK, "preempt.grace", f"GraceTime={grace} s on {where} >= "
                      f"signal_grace_s={budget} s")]


def _user_signal(s: _Scope) -> Finding:
    config = s.facts.config
    ctld = config.get("SlurmctldParameters", "").split(",")
    preempt = config.get("PreemptParameters", "").split(",")
    if "preempt_send_user_signal" in ctld or "send_user_signal" in preempt:
        return s.finding(Severity.OK, "preempt.signal",
                         f"the pool's --signal ({s.pool.signal}) is sent at preemption")
    version = config.get("SLURM_VERSION", "")
    major = version.split(".")[:2]
    old = len(major) == 2 and major[0].isdigit() and major[1].isdigit() and \
        (int(major[0]), int(major[1])) < (23, 2)
    setting = ("SlurmctldParameters=preempt_send_user_signal" if old
               else "PreemptParameters=send_user_signal (Slurm < 23.02: SlurmctldParameters="
                    "preempt_send_user_signal)")
    return s.finding(Severity.WARNING, "preempt.signal",
                     f"Slurm does not send the job's --signal ({s.pool.signal}) at preemption: "
                     "the trial learns of it only by SIGTERM, without the early warning",
                     f"add {setting} to slurm.conf")
