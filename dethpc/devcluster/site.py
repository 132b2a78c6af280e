"""What makes the dev cluster look like a real site, declared once.

Owns: ``SiteSpec`` -- the site-realistic settings of the dev cluster (fake GPUs
through typed GRES, memory as a consumable, partition time limits, Slurm's
default ``MaxArraySize``, a second QoS and a second account carrying per-user
limits) -- and the pure planning of the ``sacctmgr`` commands that bring the
accounting records in line with it (``parse_*`` read ``sacctmgr -n -P show``
output, ``plan_accounting`` returns the argv lists to run, nothing more).
Must not: run commands or touch files (``cluster`` and ``users`` do).

docs/dev-cluster.md says what each setting imitates at a real site.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: the QoS every association gets unless it says otherwise (Slurm's own default name)
DEFAULT_QOS = "normal"


@dataclass(frozen=True)
class GresSpec:
    """Typed fake GPUs: ``Gres=<name>:<type>:<count>`` on ``nodes``."""

    name: str = "gpu"
    type: str = "a100"
    count: int = 2
    nodes: tuple[str, ...] = ("n1", "n2")
    #: stand-in device files, ``<state>/dev/<file_prefix>0..count-1`` (symlinks to
    #: /dev/null: slurmd wants a character device, a plain file gives no
    #: CUDA_VISIBLE_DEVICES)
    file_prefix: str = "nvidia"

    @property
    def node_gres(self) -> str:
        """The value of ``Gres=`` on a node line, e.g. ``gpu:a100:2``."""
        return f"{self.name}:{self.type}:{self.count}"

    def device_names(self) -> list[str]:
        return [f"{self.file_prefix}{i}" for i in range(self.count)]

    def file_pattern(self, dev_dir: str) -> str:
        """``File=`` of gres.conf: ``<dev_dir>/nvidia[0-1]`` (a single file: no brackets)."""
        if self.count == 1:
            return f"{dev_dir}/{self.file_prefix}0"
        return f"{dev_dir}/{self.file_prefix}[0-{self.count - 1}]"


@dataclass(frozen=True)
class QosSpec:
    """A QoS and its per-user limits (None: no limit)."""

    name: str
    max_submit_jobs_per_user: int | None = None
    max_jobs_per_user: int | None = None

    def limits(self) -> dict[str, str]:
        """``{sacctmgr option: value}``; ``-1`` clears a limit (sacctmgr's spelling)."""
        def val(v: int | None) -> str:
            return "-1" if v is None else str(v)

        return {"MaxSubmitJobsPerUser": val(self.max_submit_jobs_per_user),
                "MaxJobsPerUser": val(self.max_jobs_per_user)}


@dataclass(frozen=True)
class AccountSpec:
    """An account, the QoS its associations may use, and the one they get by default."""

    name: str
    description: str
    qos: tuple[str, ...] = (DEFAULT_QOS,)
    default_qos: str = DEFAULT_QOS


@dataclass(frozen=True)
class SiteSpec:
    """Every site-realistic setting of the dev cluster (see docs/dev-cluster.md)."""

    gres: GresSpec = field(default_factory=GresSpec)
    #: default memory per CPU (MB); DefMemPerCPU x the node's CPUs equals the node's
    #: RealMemory (layout), so a job that asks for no memory is placed exactly as
    #: when CPUs were the only consumable
    def_mem_per_cpu_mb: int = 1000
    #: partition MaxTime / DefaultTime (sbatch --time syntax)
    max_time: str = "1-00:00:00"
    default_time: str = "01:00:00"
    max_array_size: int = 1001
    #: sbatch refuses a job over a partition limit (MaxTime ...) instead of queueing
    #: it forever with reason PartitionTimeLimit
    enforce_part_limits: str = "ALL"
    enforce: tuple[str, ...] = ("associations", "limits", "qos")
    qos: tuple[QosSpec, ...] = (
        QosSpec(DEFAULT_QOS),
        QosSpec("limited", max_submit_jobs_per_user=2, max_jobs_per_user=1),
    )
    #: the first account is every member's default account
    accounts: tuple[AccountSpec, ...] = (
        AccountSpec("dethpc", "dethpc tests"),
        AccountSpec("ml-team", "a team on the limited QoS", qos=("limited",),
                    default_qos="limited"),
    )
    #: the non-root user the limit tests submit as (``users.ensure_user``)
    test_user: str = "dethpc-user"
    test_user_account: str = "ml-team"
    #: Unix users ``up`` creates and adds as members (default account, QoS
    #: ``normal``: no per-user limits); the scale profile's fault injector and the
    #: background trace's users (``profiles``); none on the lanes
    unlimited_users: tuple[str, ...] = ()

    @property
    def default_account(self) -> str:
        return self.accounts[0].name

    @property
    def limited_qos(self) -> QosSpec:
        """The QoS that carries the per-user limits."""
        return next(q for q in self.qos if q.max_submit_jobs_per_user is not None)

    def account(self, name: str) -> AccountSpec:
        for acc in self.accounts:
            if acc.name == name:
                return acc
        allowed = ", ".join(a.name for a in self.accounts)
        raise ValueError(f"no account {name!r} in the dev cluster; allowed: {allowed}")


# ------------------------------------------------------------------ reading sacctmgr
#: ``sacctmgr -n -P show qos format=...`` (in this order)
QOS_FORMAT = "name,maxsubmitpu,maxjobspu"
#: ``sacctmgr -n -P show assoc cluster=... format=...`` (in this order)
ASSOC_FORMAT = "account,user,qos,defaultqos"


@dataclass(frozen=True)
class Association:
    account: str
    user: str  # "" for the account's own association
    qos: frozenset[str]
    default_qos: str


@dataclass(frozen=True)
class AccountingState:
    """What the accounting database holds now, as far as the plan needs it."""

    qos: dict[str, dict[str, str]]  # name -> {option: value, "" when unset}
    assocs: tuple[Association, ...]

    def assoc(self, account: str, user: str) -> Association | None:
        return next((a for a in self.assocs if a.account == account and a.user == user), None)


def parse_qos(out: str) -> dict[str, dict[str, str]]:
    """``sacctmgr -n -P show qos format=QOS_FORMAT`` -> ``{name: {option: value}}``."""
    found: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if not parts[0]:
            continue
        parts += [""] * (3 - len(parts))
        found[parts[0]] = {"MaxSubmitJobsPerUser": parts[1], "MaxJobsPerUser": parts[2]}
    return found


def parse_assocs(out: str) -> tuple[Association, ...]:
    """``sacctmgr -n -P show assoc format=ASSOC_FORMAT`` -> associations."""
    rows: list[Association] = []
    for line in out.splitlines():
        parts = line.strip().split("|")
        if not parts[0]:
            continue
        parts += [""] * (4 - len(parts))
        qos = frozenset(q for q in parts[2].split(",") if q)
        rows.append(Association(parts[0], parts[1], qos, parts[3]))
    return tuple(rows)


# ------------------------------------------------------------------ planning
def _qos_commands(site: SiteSpec, state: AccountingState) -> list[list[str]]:
    cmds: list[list[str]] = []
    for spec in site.qos:
        want = spec.limits()
        have = state.qos.get(spec.name)
        if have is None:
            set_limits = [f"{k}={v}" for k, v in want.items() if v != "-1"]
            cmds.append(["add", "qos", spec.name, *set_limits])
            continue
        # sacctmgr shows an unset limit as ""; we ask for it as -1
        differs = {k: v for k, v in want.items() if have.get(k, "") != ("" if v == "-1" else v)}
        if differs:
            cmds.append(["modify", "qos", "where", f"name={spec.name}", "set",
                         *[f"{k}={v}" for k, v in differs.items()]])
    return cmds


def _qos_options(acc: AccountSpec) -> list[str]:
    return [f"QosLevel={','.join(acc.qos)}", f"DefaultQOS={acc.default_qos}"]


def _needs_qos_fix(acc: AccountSpec, have: Association) -> bool:
    return have.qos != frozenset(acc.qos) or have.default_qos != acc.default_qos


def plan_accounting(site: SiteSpec, cluster: str, state: AccountingState,
                    members: Iterable[str], test_user: str | None = None) -> list[list[str]]:
    """The ``sacctmgr -i`` commands (argv after ``sacctmgr -i``) that make the records
    say what ``site`` declares: every QoS with its limits; every account with its QoS;
    each of ``members`` in every account (default account: the first one); and
    ``test_user``, when given, in ``site.test_user_account`` only. Empty when
    nothing is to be done, so ``up`` on a running cluster changes nothing."""
    cmds = _qos_commands(site, state)
    for acc in site.accounts:
        have = state.assoc(acc.name, "")
        if have is None:
            cmds.append(["add", "account", acc.name, f"cluster={cluster}",
                         f"description={acc.description}", "organization=dethpc",
                         *_qos_options(acc)])
        elif have is not None and _needs_qos_fix(acc, have):
            cmds.append(["modify", "account", "where", f"name={acc.name}",
                         f"cluster={cluster}", "set", *_qos_options(acc)])
    wanted: list[tuple[str, str, str]] = []  # (user, account, default account)
    for user in dict.fromkeys(members):
        wanted += [(user, acc.name, site.default_account) for acc in site.accounts]
    if test_user:
        wanted.append((test_user, site.test_user_account, site.test_user_account))
    for user, account, default in wanted:
        if state.assoc(account, user) is None:
            # the user's association inherits the account's QoS list and default QoS
            cmds.append(["add", "user", user, f"account={account}", f"cluster={cluster}",
                         f"defaultaccount={default}"])
    return cmds


def gres_conf_lines(gres: GresSpec, dev_dir: str) -> list[str]:
    """The body of gres.conf: no autodetection, one typed line for the GPU nodes."""
    return ["AutoDetect=off",
            f"NodeName={','.join(gres.nodes)} Name={gres.name} Type={gres.type} "
            f"File={gres.file_pattern(dev_dir)}"]


def member_names(names: Sequence[str]) -> list[str]:
    """``names`` stripped, empty ones dropped, duplicates removed (order kept)."""
    return list(dict.fromkeys(n.strip() for n in names if n.strip()))
