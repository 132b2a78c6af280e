"""Pure reading of a user's per-user job limits from what ``sacctmgr`` prints.

Owns: the QoS names query (``QOS_NAMES_ARGV``, ``parse_qos_names``: does a pool's QoS
exist), the two sacctmgr queries dethpc makes once per backend (``USER_ARGV`` the
user's associations with their default account, default QoS and
``MaxSubmitJobs``/``MaxJobs``; ``QOS_ARGV`` every QoS with its
``MaxSubmitJobsPerUser``/``MaxJobsPerUser``), their parsers, and ``pool_limits``:
which association and QoS a pool's jobs land in (the pool's ``account``/``qos``,
else the user's defaults, as Slurm picks them) and the limits that follow.
Must not: run commands (``SlurmSite`` in ``slurm_site`` does), or guess limits it
was not shown: an unknown QoS or account simply contributes no limit (an sbatch
refusal is still handled, as "wait and retry", by the daemon).

``sacctmgr show user withassoc`` shows a user association's limits including the
ones it inherits from its account (slurmdbd writes inherited limits into the child
rows); a limit on a *group* (``GrpSubmitJobs`` of the account) is not per-user and
is not modelled here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dethpc.backends.base import Limit, PoolLimits

#: ``sacctmgr -n -P show user <user> withassoc format=USER_FORMAT`` (in this order)
USER_FORMAT = "user,defaultaccount,account,partition,qos,defaultqos,maxsubmit,maxjobs"
#: ``sacctmgr -n -P show qos format=QOS_FORMAT`` (in this order)
QOS_FORMAT = "name,maxsubmitpu,maxjobspu"
#: the QoS Slurm gives an association that names no default and allows several
FALLBACK_QOS = "normal"


def user_argv(user: str) -> list[str]:
    return ["sacctmgr", "-n", "-P", "show", "user", user, "withassoc",
            f"format={USER_FORMAT}"]


QOS_ARGV = ["sacctmgr", "-n", "-P", "show", "qos", f"format={QOS_FORMAT}"]
#: every QoS name, one a line
QOS_NAMES_ARGV = ["sacctmgr", "-n", "-P", "show", "qos", "format=name"]


def parse_qos_names(text: str) -> set[str]:
    """``sacctmgr -n -P show qos format=name`` -> the QoS names (blank lines skipped)."""
    return {line.strip() for line in text.splitlines() if line.strip()}


@dataclass(frozen=True)
class Assoc:
    """One association of the user: (account, partition) with its QoS and limits."""

    account: str
    partition: str = ""                 # "" for every partition
    qos: tuple[str, ...] = ()
    default_qos: str = ""
    max_submit: int | None = None
    max_jobs: int | None = None


@dataclass(frozen=True)
class UserAssocs:
    user: str
    default_account: str
    assocs: tuple[Assoc, ...]

    def find(self, account: str, partition: str | None) -> Assoc | None:
        """The association a job of ``account`` in ``partition`` is charged to: the
        partition's own one when it exists, else the account's partition-less one."""
        rows = [a for a in self.assocs if a.account == account]
        return (next((a for a in rows if partition and a.partition == partition), None)
                or next((a for a in rows if not a.partition), None))


@dataclass(frozen=True)
class QosLimits:
    max_submit_per_user: int | None = None
    max_jobs_per_user: int | None = None


def _limit(text: str) -> int | None:
    """A sacctmgr limit cell: "" (unset) -> None; "2" -> 2. Anything else is unset."""
    t = text.strip()
    return int(t) if t.isdigit() else None


def parse_user_assocs(text: str, user: str) -> UserAssocs:
    """``sacctmgr -n -P show user <user> withassoc format=USER_FORMAT`` -> associations.
    Lines of another user, blank or short lines are skipped."""
    default_account = ""
    rows: list[Assoc] = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 8 or parts[0] != user:
            continue
        _, default, account, partition, qos, default_qos, max_submit, max_jobs = parts[:8]
        default_account = default_account or default.strip()
        if not account.strip():
            continue
        rows.append(Assoc(account=account.strip(), partition=partition.strip(),
                          qos=tuple(q.strip() for q in qos.split(",") if q.strip()),
                          default_qos=default_qos.strip(), max_submit=_limit(max_submit),
                          max_jobs=_limit(max_jobs)))
    return UserAssocs(user, default_account, tuple(rows))


def parse_qos_limits(text: str) -> dict[str, QosLimits]:
    """``sacctmgr -n -P show qos format=QOS_FORMAT`` -> ``{name: QosLimits}``."""
    out: dict[str, QosLimits] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if not parts[0]:
            continue
        parts += [""] * (3 - len(parts))
        out[parts[0]] = QosLimits(_limit(parts[1]), _limit(parts[2]))
    return out


def job_qos(assoc: Assoc | None, asked: str | None) -> str | None:
    """The QoS a job lands in: the one asked for, else the association's default, else
    its only QoS, else ``normal`` when allowed (Slurm's rule); None when unknown."""
    if asked:
        return asked
    if assoc is None:
        return None
    if assoc.default_qos:
        return assoc.default_qos
    if len(assoc.qos) == 1:
        return assoc.qos[0]
    return FALLBACK_QOS if FALLBACK_QOS in assoc.qos else None


def pool_limits(user: UserAssocs, qos_table: dict[str, QosLimits], *,
                partition: str | None, qos: str | None, account: str | None,
                extra_args: Sequence[str] = ()) -> PoolLimits:
    """The per-user limits that a pool's jobs fall under. ``extra_args`` are the pool's
    own sbatch arguments: a ``--qos=``/``--account=`` there wins over the fields."""
    for arg in extra_args:
        key, sep, value = arg.partition("=")
        if sep and key in ("--qos", "-q"):
            qos = value
        elif sep and key in ("--account", "-A"):
            account = value
        elif sep and key in ("--partition", "-p"):
            partition = value
    acct = account or user.default_account or None
    assoc = user.find(acct, partition) if acct else None
    q = job_qos(assoc, qos)
    limits: list[Limit] = []
    ql = qos_table.get(q) if q else None
    if ql is not None and (ql.max_submit_per_user is not None
                           or ql.max_jobs_per_user is not None):
        assert q is not None
        limits.append(Limit("qos", q, ql.max_submit_per_user, ql.max_jobs_per_user))
    if assoc is not None and (assoc.max_submit is not None or assoc.max_jobs is not None):
        limits.append(Limit("assoc", assoc.account, assoc.max_submit, assoc.max_jobs))
    return PoolLimits(qos=q, account=acct, limits=tuple(limits))
