"""What the live cluster says, for ``dethpc admin check``: parsed, typed facts.

Owns: the parsers of ``scontrol -o show partition|node`` records and of the
``sacctmgr -n -P`` tables that ``admin check`` asks for (QoS with per-user
limits, the user's associations, accounts, the user's default account), the
``ClusterFacts`` they make up, and ``gather_facts``, which runs a fixed set of
seven commands (three ``scontrol``, four ``sacctmgr``) whatever the number of
pools. ``scontrol show config`` is read by ``slurm_parse.parse_key_values``;
times and GRES by ``slurm_parse`` too.
Must not: judge anything (``dethpc.surfaces.admin.checks`` does) or run a command except
through the ``CommandRunner`` it is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from dethpc.backends import slurm_parse as sp
from dethpc.backends.slurm_commands import SITE_QUERIES, accounting_queries
from dethpc.common.runner import CommandRunner
from dethpc.common.sbatch_options import parse_time

# ------------------------------------------------------------------ records
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:.]*)=")


def parse_record(line: str) -> dict[str, str]:
    """One ``scontrol -o show ...`` line -> dict. A value runs up to the next
    ``Key=``, so values with blanks (``OS=Linux 6.1 #1 SMP``, ``Reason=Not responding``)
    stay whole."""
    out: dict[str, str] = {}
    matches = list(_KEY.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out.setdefault(m[1], line[m.end():end].strip())
    return out


def parse_records(text: str) -> list[dict[str, str]]:
    return [parse_record(line) for line in text.splitlines() if "=" in line]


def _names(value: str) -> tuple[str, ...] | None:
    """"ALL" (or empty) -> None (= any); "a,b" -> ("a", "b")."""
    v = value.strip()
    if not v or v.upper() in ("ALL", "(NULL)", "N/A"):
        return None
    return tuple(x for x in v.split(",") if x)


def _int(value: str, default: int = 0) -> int:
    m = re.match(r"\d+", value.strip())
    return int(m[0]) if m else default


def _limit(value: str) -> int | None:
    """A sacctmgr limit: "" (none) -> None, "2" -> 2."""
    v = value.strip()
    return int(v) if v.isdigit() else None


def _time(value: str) -> int | None:
    try:
        return parse_time(value)
    except ValueError:
        return None


# --------------------------------------------------------------- partitions
@dataclass(frozen=True)
class PartitionFacts:
    name: str
    state: str = "UP"
    default: bool = False
    #: seconds; None = UNLIMITED
    max_time_s: int | None = None
    #: seconds; None = NONE (the job gets MaxTime)
    default_time_s: int | None = None
    grace_time_s: int = 0
    preempt_mode: str = "OFF"
    nodes: str = ""
    #: None = ALL
    allow_qos: tuple[str, ...] | None = None
    deny_qos: tuple[str, ...] = ()
    allow_accounts: tuple[str, ...] | None = None
    deny_accounts: tuple[str, ...] = ()
    max_time_text: str = "UNLIMITED"


def parse_partitions(text: str) -> dict[str, PartitionFacts]:
    """``scontrol -a -o show partition`` -> partitions by name."""
    out: dict[str, PartitionFacts] = {}
    for rec in parse_records(text):
        name = rec.get("PartitionName")
        if not name:
            continue
        out[name] = PartitionFacts(
            name=name,
            state=rec.get("State", "UP").upper(),
            default=rec.get("Default", "NO").upper() == "YES",
            max_time_s=_time(rec.get("MaxTime", "UNLIMITED")),
            default_time_s=_time(rec.get("DefaultTime", "NONE")),
            grace_time_s=_int(rec.get("GraceTime", "0")),
            preempt_mode=rec.get("PreemptMode", "OFF").upper(),
            nodes=rec.get("Nodes", ""),
            allow_qos=_names(rec.get("AllowQos", "ALL")),
            deny_qos=_names(rec.get("DenyQos", "")) or (),
            allow_accounts=_names(rec.get("AllowAccounts", "ALL")),
            deny_accounts=_names(rec.get("DenyAccounts", "")) or (),
            max_time_text=rec.get("MaxTime", "UNLIMITED"),
        )
    return out


# -------------------------------------------------------------------- nodes
@dataclass(frozen=True)
class Gres:
    name: str
    type: str | None
    count: int


def parse_gres(text: str) -> tuple[Gres, ...]:
    """A node's ``Gres=`` value: "gpu:a100:2(S:0-1),gpu:v100:1" -> typed entries;
    "(null)" -> (). Without a count a GRES counts one."""
    out: list[Gres] = []
    for item in re.split(r",(?![^(]*\))", text.strip()):
        item = re.sub(r"\(.*?\)", "", item).strip()
        if not item or item.lower() == "null":
            continue
        parts = item.split(":")
        count = 1
        if len(parts) >= 2 and parts[-1].isdigit():
            count = int(parts.pop())
        kind = parts[1] if len(parts) >= 2 else None
        out.append(Gres(parts[0], kind, count))
    return tuple(out)


#: node state words (base state or '+' flag) that mean "takes no new jobs"
_UNUSABLE = ("DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE",
             "INVALID", "NOT_RESPONDING", "MAINT", "REBOOT_ISSUED", "INVALID_REG")


@dataclass(frozen=True)
class NodeFacts:
    name: str
    cpus: int
    #: MB usable by jobs (RealMemory - MemSpecLimit)
    memory_mb: int
    gres: tuple[Gres, ...] = ()
    state: str = "IDLE"
    partitions: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        words = self.state.upper().replace("*", "+NOT_RESPONDING").split("+")
        return not any(w in _UNUSABLE for w in words)

    def gpus(self, gpu_type: str | None = None) -> int:
        """GPUs on this node (of ``gpu_type`` when given)."""
        return sum(g.count for g in self.gres
                   if g.name == "gpu" and (gpu_type is None or g.type == gpu_type))

    def gpu_types(self) -> set[str]:
        return {g.type for g in self.gres if g.name == "gpu" and g.type}


def parse_nodes(text: str) -> list[NodeFacts]:
    """``scontrol -o show node`` -> nodes (``CPUEfctv`` when Slurm reports it, else
    ``CPUTot``)."""
    out: list[NodeFacts] = []
    for rec in parse_records(text):
        name = rec.get("NodeName")
        if not name:
            continue
        cpus = _int(rec.get("CPUEfctv", "") or rec.get("CPUTot", "0"), _int(rec.get("CPUTot", "0")))
        memory = _int(rec.get("RealMemory", "0")) - _int(rec.get("MemSpecLimit", "0"))
        out.append(NodeFacts(
            name=name, cpus=cpus, memory_mb=max(memory, 0),
            gres=parse_gres(rec.get("Gres", "")),
            state=rec.get("State", "UNKNOWN"),
            partitions=_names(rec.get("Partitions", "")) or (),
        ))
    return out


# ------------------------------------------------------------------ sacctmgr
#: the ``format=`` of each sacctmgr query, in the order the parsers read the columns
QOS_FORMAT = "name,maxsubmitjobsperuser,maxjobsperuser,preemptmode,gracetime"
ASSOC_FORMAT = "cluster,account,user,partition,qos,defaultqos,maxjobs,maxsubmitjobs"


@dataclass(frozen=True)
class QosFacts:
    name: str
    max_submit_per_user: int | None = None
    max_jobs_per_user: int | None = None
    #: None = the cluster's PreemptMode ("cluster" in sacctmgr)
    preempt_mode: str | None = None
    grace_time_s: int = 0


def _rows(text: str, width: int) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        rows.append((cells + [""] * width)[:width])
    return rows


def parse_qos(text: str) -> dict[str, QosFacts]:
    """``sacctmgr -n -P show qos format=QOS_FORMAT`` -> QoS by name."""
    out: dict[str, QosFacts] = {}
    for name, submit, jobs, mode, grace in _rows(text, 5):
        mode = mode.strip().upper()
        out[name] = QosFacts(name, _limit(submit), _limit(jobs),
                             None if mode in ("", "CLUSTER") else mode,
                             _time(grace) or 0)
    return out


@dataclass(frozen=True)
class AssocFacts:
    cluster: str
    account: str
    user: str
    #: None = every partition
    partition: str | None
    qos: tuple[str, ...]
    default_qos: str | None
    max_jobs: int | None = None
    max_submit: int | None = None


def parse_assocs(text: str) -> list[AssocFacts]:
    """``sacctmgr -n -P show assoc where user=U format=ASSOC_FORMAT`` -> associations."""
    return [AssocFacts(cluster, account, user, partition or None,
                       tuple(q for q in qos.split(",") if q), default_qos or None,
                       _limit(max_jobs), _limit(max_submit))
            for cluster, account, user, partition, qos, default_qos, max_jobs, max_submit
            in _rows(text, 8)]


def parse_first_column(text: str) -> set[str]:
    return {line.split("|")[0].strip() for line in text.splitlines() if line.strip()}


# ---------------------------------------------------------------- the facts
@dataclass(frozen=True)
class ClusterFacts:
    """Everything ``admin check`` compares the cluster config with."""

    user: str
    config: dict[str, str]
    partitions: dict[str, PartitionFacts]
    nodes: tuple[NodeFacts, ...]
    #: None when sacctmgr could not be read (``accounting_problem`` says why)
    qos: dict[str, QosFacts] | None = None
    accounts: set[str] | None = None
    assocs: tuple[AssocFacts, ...] | None = None
    default_account: str | None = None
    accounting_problem: str = ""

    @property
    def cluster_name(self) -> str:
        return self.config.get("ClusterName", "")

    @property
    def accounting(self) -> bool:
        kind = self.config.get("AccountingStorageType", "")
        return bool(kind) and not kind.endswith("/none")

    def enforce(self, word: str) -> bool:
        """True when ``AccountingStorageEnforce`` includes ``word`` (``limits`` implies
        ``associations``; ``qos`` implies it too, as in slurm.conf(5))."""
        words = {w.strip().lower() for w in
                 self.config.get("AccountingStorageEnforce", "").split(",")}
        implied = {"associations": {"associations", "limits", "qos", "safe"},
                   "limits": {"limits", "safe"}}
        return bool(words & implied.get(word, {word}))


def gather_facts(runner: CommandRunner, user: str) -> ClusterFacts:
    """Ask the cluster (seven commands, see the module docstring). A failing
    ``scontrol`` raises ``CommandError`` (nothing can be checked); failing
    ``sacctmgr`` commands leave the accounting facts None with the reason."""
    config = sp.parse_key_values(runner.run(SITE_QUERIES["config"]).stdout)
    partitions = parse_partitions(runner.run(SITE_QUERIES["partitions"]).stdout)
    nodes = tuple(parse_nodes(runner.run(SITE_QUERIES["nodes"]).stdout))
    facts = ClusterFacts(user=user, config=config, partitions=partitions, nodes=nodes)
    kind = config.get("AccountingStorageType", "")
    if not kind or kind.endswith("/none"):
        return facts
    out: dict[str, str] = {}
    for key, argv in accounting_queries(user, config.get("ClusterName", ""), QOS_FORMAT,
                                         ASSOC_FORMAT).items():
        res = runner.run(argv, check=False)
        if res.returncode != 0:
            problem = f"`{' '.join(argv[:5])}` failed (exit {res.returncode}): " \
                      f"{(res.stderr or res.stdout).strip()[:300]}"
            return replace(facts, accounting_problem=problem)
        out[key] = res.stdout
    users = [row for row in _rows(out["user"], 2) if row[0] == user]
    return replace(facts, qos=parse_qos(out["qos"]), assocs=tuple(parse_assocs(out["assoc"])),
                   accounts=parse_first_column(out["account"]),
                   default_account=(users[0][1] or None) if users else None)
