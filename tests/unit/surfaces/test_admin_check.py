"""``dethpc admin check``'s pure parts: parsers of what scontrol/sacctmgr print, every
check (cluster config + parsed facts -> findings) and the probe's argv and verdicts.

The facts are parsed from text captured on the dev cluster (Slurm 22.05.8), edited
per row; the Slurm tier (tests/slurm/test_admin_check_slurm.py) changes the live
cluster instead."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from dethpc.backends.slurm_parse import parse_key_values
from dethpc.config.cluster import parse_cluster_config
from dethpc.config.model import ResourcePool
from dethpc.surfaces.admin.checks import Finding, Severity, check_cluster, check_pool, exit_code
from dethpc.surfaces.admin.facts import (
    ClusterFacts,
    Gres,
    NodeFacts,
    QosFacts,
    parse_assocs,
    parse_gres,
    parse_nodes,
    parse_partitions,
    parse_qos,
    parse_record,
)
from dethpc.surfaces.admin.probe import ProbeOutcome, judge_probe, probe_argv

# ------------------------------------------------------------- captured text
CONFIG = """\
Configuration data as of 2026-11-24T16:45:00
AccountingStorageEnforce = associations,limits,qos
AccountingStorageType   = accounting_storage/slurmdbd
ClusterName             = devcluster
GresTypes               = gpu
KillWait                = 5 sec
MaxArraySize            = 1001
PreemptMode             = REQUEUE
PreemptType             = preempt/partition_prio
SlurmctldParameters     = preempt_send_user_signal
SLURM_VERSION           = 22.05.8
"""

_PART = ("PartitionName={name} AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL "
         "Default={default} QoS=N/A DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO "
         "GraceTime={grace} Hidden=NO MaxNodes=UNLIMITED MaxTime=1-00:00:00 MinNodes=0 LLN=NO "
         "MaxCPUsPerNode=UNLIMITED Nodes=n[1-4] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO "
         "ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode={mode} State=UP "
         "TotalCPUs=64 TotalNodes=4 SelectTypeParameters=NONE JobDefaults=(null) "
         "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=64,mem=62.50G,node=4")
PARTITIONS = "\n".join([
    _PART.format(name="debug", default="YES", grace=0, mode="OFF"),
    _PART.format(name="low", default="NO", grace=10, mode="REQUEUE"),
    _PART.format(name="high", default="NO", grace=0, mode="OFF"),
])

_NODE = ("NodeName={name} Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=16 CPUTot=16 "
         "CPULoad=2.45 AvailableFeatures=(null) ActiveFeatures=(null) Gres={gres} "
         "NodeAddr=127.0.0.1 NodeHostName=vm Version=22.05.8 OS=Linux 6.18.44-fc-v657 #1 SMP "
         "PREEMPT_DYNAMIC @0  RealMemory=16000 AllocMem=0 FreeMem=22546 Sockets=16 Boards=1 "
         "State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
         "Partitions=debug,low,high  BootTime=2026-11-24T16:30:53 "
         "CfgTRES=cpu=16,mem=16000M,billing=16 AllocTRES= CapWatts=n/a")
NODES = "\n".join(_NODE.format(name=f"n{i}", gres="gpu:a100:2" if i <= 2 else "(null)",
                               state="IDLE") for i in range(1, 5))

QOS = "normal|||cluster|00:00:00\nlimited|2|1|cluster|00:00:00\n"
ASSOCS = ("devcluster|ml-team|root||limited|limited||\n"
          "devcluster|dethpc|root||normal|normal||\n"
          "devcluster|root|root||normal|||\n")


def facts(config: str = CONFIG, partitions: str = PARTITIONS, nodes: str = NODES,
          qos: str = QOS, assocs: str = ASSOCS, **changes: object) -> ClusterFacts:
    """Facts parsed from the texts given (the dev cluster's by default), then ``changes``."""
    base = ClusterFacts(user="root", config=parse_key_values(config),
                        partitions=parse_partitions(partitions),
                        nodes=tuple(parse_nodes(nodes)), qos=parse_qos(qos),
                        accounts={"dethpc", "ml-team", "root"},
                        assocs=tuple(parse_assocs(assocs)), default_account="dethpc")
    return replace(base, **changes)  # type: ignore[arg-type]


ASSOCS_NO_ROOT_ACCOUNT = "".join(ASSOCS.splitlines(keepends=True)[:2])


def config_with(key: str, value: str) -> str:
    lines = [ln for ln in CONFIG.splitlines() if not ln.startswith(f"{key} ")]
    return "\n".join([*lines, f"{key} = {value}"]) + "\n"


POOL = ResourcePool(name="p", partition="debug", account="dethpc")
GPU = replace(POOL, gres="gpu", gpu_type="a100", slots_per_node=2, cpus_per_slot=4,
              mem_per_slot="4G")
LOW = replace(POOL, partition="low", preemptible=True, signal_grace_s=10)


def by_check(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def one(findings: list[Finding], check: str) -> Finding:
    found = by_check(findings, check)
    assert len(found) == 1, (check, findings)
    return found[0]


# -------------------------------------------------------------------- parsers
def test_parse_record_keeps_values_with_blanks_whole() -> None:
    rec = parse_record(_NODE.format(name="n1", gres="gpu:a100:2(S:0-1)", state="IDLE+DRAIN")
                       + " Reason=Not responding [slurm@2026-11-24T16:30:53]")
    assert rec["OS"] == "Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0"
    assert rec["Reason"] == "Not responding [slurm@2026-11-24T16:30:53]"
    assert rec["Gres"] == "gpu:a100:2(S:0-1)"
    assert rec["AllocTRES"] == ""


@pytest.mark.parametrize(("text", "expected"), [
    ("(null)", ()),
    ("", ()),
    ("gpu:a100:2", (Gres("gpu", "a100", 2),)),
    ("gpu:a100:2(S:0-1),gpu:v100:1", (Gres("gpu", "a100", 2), Gres("gpu", "v100", 1))),
    ("gpu:4", (Gres("gpu", None, 4),)),
    ("gpu", (Gres("gpu", None, 1),)),
    ("gpu:a100:4(S:0-1),mps:100", (Gres("gpu", "a100", 4), Gres("mps", None, 100))),
])
def test_parse_gres(text: str, expected: tuple[Gres, ...]) -> None:
    assert parse_gres(text) == expected


@pytest.mark.parametrize(("state", "usable"), [
    ("IDLE", True), ("MIXED", True), ("ALLOCATED", True), ("IDLE+POWERED_DOWN", True),
    ("DOWN", False), ("DOWN*", False), ("IDLE*", False), ("IDLE+DRAIN", False),
    ("DRAINED", False), ("MIXED+DRAIN", False), ("FUTURE", False), ("IDLE+MAINT", False),
])
def test_node_usable(state: str, usable: bool) -> None:
    assert NodeFacts("n1", 1, 1, state=state).usable is usable


def test_parse_nodes_and_partitions_from_the_dev_cluster() -> None:
    nodes = parse_nodes(NODES)
    assert [(n.name, n.cpus, n.memory_mb, n.gpus(), n.gpus("a100"), n.gpus("h100"))
            for n in nodes] == [("n1", 16, 16000, 2, 2, 0), ("n2", 16, 16000, 2, 2, 0),
                                ("n3", 16, 16000, 0, 0, 0), ("n4", 16, 16000, 0, 0, 0)]
    assert nodes[0].partitions == ("debug", "low", "high")
    low = parse_partitions(PARTITIONS)["low"]
    assert (low.state, low.default, low.max_time_s, low.default_time_s, low.grace_time_s,
            low.preempt_mode, low.allow_qos, low.allow_accounts) == \
        ("UP", False, 86400, 3600, 10, "REQUEUE", None, None)
    assert parse_partitions(PARTITIONS)["debug"].default


def test_parse_nodes_memspec_and_cputot_fallback() -> None:
    node = parse_nodes("NodeName=a CPUTot=32 RealMemory=64000 MemSpecLimit=4000 State=IDLE "
                       "Gres=(null) Partitions=p")[0]
    assert (node.cpus, node.memory_mb) == (32, 60000)


def test_parse_qos_and_assocs() -> None:
    assert parse_qos(QOS + "preemptible|||requeue|00:02:00\n") == {
        "normal": QosFacts("normal"),
        "limited": QosFacts("limited", 2, 1),
        "preemptible": QosFacts("preemptible", None, None, "REQUEUE", 120),
    }
    ml = parse_assocs("devcluster|ml-team|u|gpu|limited,normal|limited|3|5\n")[0]
    assert (ml.account, ml.partition, ml.qos, ml.default_qos, ml.max_jobs, ml.max_submit) == \
        ("ml-team", "gpu", ("limited", "normal"), "limited", 3, 5)


@pytest.mark.parametrize(("enforce", "assoc", "limits", "qos"), [
    ("associations,limits,qos", True, True, True),
    ("associations", True, False, False),
    ("limits", True, True, False),
    ("qos", True, False, True),
    ("safe", True, True, False),
    ("none", False, False, False),
])
def test_enforce(enforce: str, assoc: bool, limits: bool, qos: bool) -> None:
    f = facts(config=config_with("AccountingStorageEnforce", enforce))
    assert (f.enforce("associations"), f.enforce("limits"), f.enforce("qos")) == \
        (assoc, limits, qos)


# --------------------------------------------------------- the whole cluster
def test_a_config_matching_the_dev_cluster_is_clean() -> None:
    cfg = parse_cluster_config({"backend": "slurm", "default_pool": "cpu", "pools": {
        "cpu": {"partition": "debug", "account": "dethpc", "qos": "normal",
                "slots_per_node": 4, "cpus_per_slot": 2, "mem_per_slot": "1G"},
        "gpu": {"partition": "debug", "account": "dethpc", "gres": "gpu", "gpu_type": "a100",
                "slots_per_node": 2, "cpus_per_slot": 4, "mem_per_slot": "4G"},
        "low": {"partition": "low", "account": "dethpc", "preemptible": True,
                "signal_grace_s": 10, "default_time": "01:00:00"}}}, "t")
    findings = check_cluster(cfg, facts())
    assert [f for f in findings if f.severity is not Severity.OK] == []
    assert exit_code(findings) == 0
    checks = {(f.pool, f.check) for f in findings}
    assert {("", "max_array_size"), ("", "accounting"), ("gpu", "gres"), ("gpu", "fit"),
            ("low", "preempt.mode"), ("low", "preempt.grace"), ("low", "preempt.signal"),
            ("cpu", "association"), ("cpu", "limits"), ("cpu", "time")} <= checks
    only_low = check_cluster(cfg, facts(), ["low"])
    assert {f.pool for f in only_low} == {"", "low"}


def test_exit_code_counts_errors_only() -> None:
    warn = Finding(Severity.WARNING, "p", "x", "m", "f")
    err = Finding(Severity.ERROR, "p", "x", "m", "f")
    assert exit_code([warn]) == 0
    assert exit_code([warn, err]) == 1
    assert err.to_dict() == {"severity": "error", "pool": "p", "check": "x", "message": "m",
                             "fix": "f"}


@pytest.mark.parametrize(("value", "severity", "words"), [
    ("1001", Severity.OK, "arrays of at most 1001"),
    ("10001", Severity.OK, "at most 10001"),
    ("1", Severity.WARNING, "every trial is its own sbatch"),
    ("0", Severity.ERROR, "job arrays are disabled"),
])
def test_max_array_size(value: str, severity: Severity, words: str) -> None:
    cfg = parse_cluster_config({"backend": "slurm", "pools": {"p": {}}}, "t")
    found = one(check_cluster(cfg, facts(config=config_with("MaxArraySize", value))),
                "max_array_size")
    assert (found.severity, found.pool) == (severity, "")
    assert words in found.message


def test_accounting_off_or_unreadable_is_a_warning_and_skips_accounting_checks() -> None:
    cfg = parse_cluster_config({"backend": "slurm", "pools": {"p": {"qos": "nosuch"}}}, "t")
    off = replace(facts(config=config_with("AccountingStorageType", "accounting_storage/none")),
                  qos=None, assocs=None, accounts=None)
    found = check_cluster(cfg, off)
    assert one(found, "accounting").severity is Severity.WARNING
    assert "sacct" in one(found, "accounting").message
    assert by_check(found, "qos") == []
    broken = replace(facts(), qos=None, assocs=None, accounts=None,
                     accounting_problem="`sacctmgr -n -P show qos` failed (exit 1): boom")
    problem = one(check_cluster(cfg, broken), "accounting")
    assert problem.severity is Severity.WARNING and "boom" in problem.message


# ------------------------------------------------------------------ partition
def _part_line(name: str, **fields: str) -> str:
    line = _PART.format(name=name, default="NO", grace=0, mode="OFF")
    for key, value in fields.items():
        line = " ".join(f"{key}={value}" if w.startswith(f"{key}=") else w
                        for w in line.split(" "))
    return line


@pytest.mark.parametrize(("pool", "partitions", "nodes", "words"), [
    (replace(POOL, partition="nosuch"), PARTITIONS, NODES,
     "partition 'nosuch' does not exist"),
    (replace(POOL, partition="low"), _part_line("low", State="DOWN"), NODES,
     "partition low is DOWN"),
    (replace(POOL, partition="low"), _part_line("low", State="DRAIN"), NODES,
     "partition low is DRAIN: it refuses new jobs"),
    (replace(POOL, partition="low"), _part_line("low", State="INACTIVE"), NODES,
     "partition low is INACTIVE"),
    (replace(POOL, partition=None), _part_line("low"), NODES, "no default partition"),
    (POOL, PARTITIONS, NODES.replace("State=IDLE", "State=DOWN*"), "none of its nodes"),
])
def test_partition_errors(pool: ResourcePool, partitions: str, nodes: str, words: str) -> None:
    found = check_pool(pool, facts(partitions=partitions, nodes=nodes))
    part = one(found, "partition")
    assert part.severity is Severity.ERROR
    assert words in part.message
    assert part.fix


def test_partition_ok_and_default_partition() -> None:
    found = one(check_pool(replace(POOL, partition=None), facts()), "partition")
    assert found.severity is Severity.OK
    assert "the default partition debug is UP with 4 usable node(s)" in found.message
    drained = NODES.replace("n1 ", "n1 ").replace("State=IDLE", "State=IDLE+DRAIN", 3)
    found = one(check_pool(POOL, facts(nodes=drained)), "partition")
    assert "1 usable node(s)" in found.message


def test_a_down_partition_still_gets_the_other_checks() -> None:
    found = check_pool(replace(GPU, gpu_type="h100"),
                       facts(partitions=_part_line("debug", State="DOWN")))
    assert one(found, "partition").severity is Severity.ERROR
    assert one(found, "gres").severity is Severity.ERROR


# ----------------------------------------------------------------- accounting
@pytest.mark.parametrize(("pool", "changes", "check", "severity", "words"), [
    (replace(POOL, qos="nosuch"), {}, "qos", Severity.ERROR, "QoS 'nosuch' does not exist"),
    (replace(POOL, account="nosuch"), {}, "account", Severity.ERROR,
     "account 'nosuch' does not exist"),
    (replace(POOL, account="root"), {"assocs": ASSOCS_NO_ROOT_ACCOUNT},
     "association", Severity.ERROR, "user root has no association with account root"),
    (replace(POOL, account="ml-team", qos="normal"), {}, "association", Severity.ERROR,
     "may not use QoS normal (allowed: limited)"),
    (replace(POOL, account=None), {"default_account": None, "assocs": ""}, "association",
     Severity.ERROR, "any account (and no default account)"),
    (replace(POOL, account="root"),
     {"assocs": ASSOCS_NO_ROOT_ACCOUNT,
      "config": config_with("AccountingStorageEnforce", "none")},
     "association", Severity.WARNING, "no association"),
])
def test_accounting_findings(pool: ResourcePool, changes: dict[str, str], check: str,
                             severity: Severity, words: str) -> None:
    found = one(check_pool(pool, facts(**changes)), check)
    assert (found.severity, found.pool) == (severity, "p")
    assert words in found.message
    assert found.fix


def test_partition_allow_and_deny_lists() -> None:
    allow = facts(partitions=_part_line("debug", AllowQos="limited", AllowAccounts="ml-team"))
    found = check_pool(replace(POOL, qos="normal"), allow)
    assert one(found, "qos").severity is Severity.ERROR
    assert "does not allow QoS normal" in one(found, "qos").message
    assert "does not allow account dethpc" in one(found, "account").message
    deny = facts(partitions=_part_line("debug") + " DenyQos=normal")
    assert one(check_pool(replace(POOL, qos="normal"), deny), "qos").severity is Severity.ERROR


def test_partition_specific_association_is_preferred() -> None:
    assocs = ("devcluster|dethpc|root|low|normal,limited|limited||\n"
              "devcluster|dethpc|root||normal|normal||\n")
    on_low = one(check_pool(replace(POOL, partition="low", preemptible=False),
                            facts(assocs=assocs)), "limits")
    assert on_low.severity is Severity.WARNING  # default QoS limited on low
    on_debug = one(check_pool(POOL, facts(assocs=assocs)), "limits")
    assert on_debug.severity is Severity.OK


@pytest.mark.parametrize(("pool", "assocs", "enforce", "severity", "words"), [
    (replace(POOL, account="ml-team", qos="limited"), ASSOCS, "associations,limits,qos",
     Severity.WARNING, "at most 2 job(s) pending+running (MaxSubmitJobsPerUser of QoS "
     "limited); at most 1 job(s) running (MaxJobsPerUser of QoS limited)"),
    # no qos in the pool: the association's default QoS (limited) applies
    (replace(POOL, account="ml-team"), ASSOCS, "associations,limits,qos",
     Severity.WARNING, "dethpc keeps at most 2 in the queue"),
    (POOL, ASSOCS, "associations,limits,qos", Severity.OK, "no per-user job limits"),
    (POOL, "devcluster|dethpc|root||normal|normal|4|10\n", "associations,limits",
     Severity.WARNING, "at most 10 job(s) pending+running (MaxSubmitJobs of account dethpc)"),
    (replace(POOL, account="ml-team"), ASSOCS, "associations", Severity.OK,
     "not enforced"),
    # no default QoS: the only QoS allowed, else normal
    (POOL, "devcluster|dethpc|root||limited||\n", "limits", Severity.WARNING,
     "MaxSubmitJobsPerUser of QoS limited"),
    (POOL, "devcluster|dethpc|root||limited,normal||\n", "limits", Severity.OK,
     "no per-user job limits"),
    # a --qos in the pool's sbatch_args wins over its field, as for the daemon
    (replace(POOL, account="ml-team", sbatch_args=("--qos=limited",)), ASSOCS, "limits",
     Severity.WARNING, "MaxSubmitJobsPerUser of QoS limited"),
    # QoS and association limits together: the tightest submit limit is the pace
    (replace(POOL, account="ml-team"), "devcluster|ml-team|root||limited|limited|3|1\n",
     "associations,limits,qos", Severity.WARNING,
     "at most 2 job(s) pending+running (MaxSubmitJobsPerUser of QoS limited); at most 1 "
     "job(s) running (MaxJobsPerUser of QoS limited); at most 1 job(s) pending+running "
     "(MaxSubmitJobs of account ml-team); at most 3 job(s) running (MaxJobs of account "
     "ml-team). Every array task counts as one job; dethpc keeps at most 1 in the queue"),
])
def test_user_limits(pool: ResourcePool, assocs: str, enforce: str, severity: Severity,
                     words: str) -> None:
    f = facts(assocs=assocs, config=config_with("AccountingStorageEnforce", enforce))
    found = one(check_pool(pool, f), "limits")
    assert found.severity is severity
    assert words in found.message


# ----------------------------------------------------------------- gres / fit
@pytest.mark.parametrize(("pool", "changes", "check", "words", "fix"), [
    (replace(GPU, gpu_type="h100"), {}, "gres", "no node of partition debug has GPUs of "
     "type h100 (types there: a100)", "set pools.p.gpu_type to one of: a100"),
    (replace(GPU, slots_per_node=4, cpus_per_slot=1, mem_per_slot=None), {}, "gres",
     "slots_per_node=4 asks 4 gpu:a100 per node, but nodes of debug have at most 2",
     "set pools.p.slots_per_node to 2 or fewer"),
    (GPU, {"nodes": NODES.replace("gpu:a100:2", "(null)")}, "gres",
     "no node of partition debug has GPUs", "drop pools.p.gres"),
    (GPU, {"config": config_with("GresTypes", "(null)")}, "gres",
     "GresTypes does not list gpu", "GresTypes=gpu"),
    (replace(POOL, slots_per_node=4, cpus_per_slot=5), {}, "fit",
     "4 x 5 = 20 CPUs per node, but the largest node has 16",
     "set pools.p.cpus_per_slot to 4 or fewer"),
    (replace(POOL, slots_per_node=2, mem_per_slot="10G"), {}, "fit",
     "2 x 10G = 20480 MB per node, but the largest node has 16000 MB",
     "set pools.p.mem_per_slot to 8000M or less"),
    # one GPU node has the CPUs, the other the memory: no single node has both
    (replace(GPU, cpus_per_slot=16), {"nodes": "\n".join([
        _NODE.format(name="g1", gres="gpu:a100:2", state="IDLE")
        .replace("CPUEfctv=16", "CPUEfctv=64").replace("RealMemory=16000", "RealMemory=4000"),
        _NODE.format(name="g2", gres="gpu:a100:2", state="IDLE")])},
     "fit", "no single node offers a full node of this pool (32 CPUs, 8192 MB, 2 GPUs)",
     "lower pools.p.slots_per_node"),
])
def test_gres_and_fit_errors(pool: ResourcePool, changes: dict[str, str], check: str,
                             words: str, fix: str) -> None:
    found = by_check(check_pool(pool, facts(**changes)), check)
    errors = [f for f in found if f.severity is Severity.ERROR]
    assert errors, found
    assert any(words in f.message and fix in f.fix for f in errors), errors


def test_gres_and_fit_ok() -> None:
    found = check_pool(GPU, facts())
    assert one(found, "gres").message == "2 node(s) of debug have >= 2 gpu:a100"
    assert one(found, "fit").message == \
        "2 node(s) fit a full node of this pool (8 CPUs, 8192 MB, 2 GPUs)"
    untyped = check_pool(replace(GPU, gpu_type=None), facts())
    assert one(untyped, "gres").severity is Severity.OK
    assert by_check(check_pool(POOL, facts()), "gres") == []


# ----------------------------------------------------------------------- time
@pytest.mark.parametrize(("default_time", "max_time", "severity", "words"), [
    ("01:00:00", "1-00:00:00", Severity.OK, "default_time 01:00:00 fits MaxTime 1-00:00:00"),
    ("01:00:00", "00:10:00", Severity.ERROR, "default_time 01:00:00 is over partition "
     "debug's MaxTime 00:10:00"),
    ("UNLIMITED", "1-00:00:00", Severity.ERROR, "is over partition"),
    ("2-00:00:00", "UNLIMITED", Severity.OK, "fits MaxTime UNLIMITED"),
    ("90", "01:30:00", Severity.OK, "fits"),
    ("91", "01:30:00", Severity.ERROR, "is over"),
    (None, "00:10:00", Severity.OK, "jobs get the partition's default (01:00:00)"),
])
def test_time(default_time: str | None, max_time: str, severity: Severity,
              words: str) -> None:
    pool = replace(POOL, default_time=default_time, signal_grace_s=5)
    found = by_check(check_pool(pool, facts(partitions=_part_line("debug", MaxTime=max_time))),
                     "time")
    assert found[0].severity is severity
    assert words in found[0].message


def test_signal_grace_not_shorter_than_the_time_limit_is_a_warning() -> None:
    found = by_check(check_pool(replace(POOL, default_time="2", signal_grace_s=120), facts()),
                     "time")
    assert [f.severity for f in found] == [Severity.OK, Severity.WARNING]
    assert "comes as soon as the job starts" in found[1].message


# ----------------------------------------------------------------- preemption
@pytest.mark.parametrize(("mode", "severity", "words"), [
    ("REQUEUE", Severity.OK, "goes back to the queue"),
    ("CANCEL", Severity.WARNING, "the progress since that checkpoint is lost"),
    ("SUSPEND,GANG", Severity.OK, "suspended in place"),
    ("OFF", Severity.WARNING, "never preempted"),
])
def test_preempt_mode(mode: str, severity: Severity, words: str) -> None:
    f = facts(partitions=_part_line("low", PreemptMode=mode, GraceTime="10"))
    found = one(check_pool(LOW, f), "preempt.mode")
    assert found.severity is severity
    assert words in found.message
    assert bool(found.fix) is (severity is not Severity.OK)


def test_not_preemptible_pools_skip_the_preemption_checks() -> None:
    found = check_pool(replace(LOW, preemptible=False), facts())
    assert [f for f in found if f.check.startswith("preempt")] == []


def test_preempt_type_none_and_preempt_by_qos() -> None:
    none = facts(config=config_with("PreemptType", "preempt/none"))
    found = check_pool(LOW, none)
    assert one(found, "preempt.mode").severity is Severity.WARNING
    assert "PreemptType=preempt/none" in one(found, "preempt.mode").message
    # preempt/qos: the QoS's mode and GraceTime count, not the partition's
    by_qos = facts(config=config_with("PreemptType", "preempt/qos"),
                   qos=QOS + "scavenger|||cancel|00:00:30\n",
                   assocs="devcluster|dethpc|root||normal,scavenger|normal||\n")
    found = check_pool(replace(LOW, qos="scavenger", signal_grace_s=60), by_qos)
    assert "PreemptMode=CANCEL on QoS scavenger" in one(found, "preempt.mode").message
    assert "GraceTime=30 s on QoS scavenger" in one(found, "preempt.grace").message
    # a QoS without its own mode uses the cluster's PreemptMode
    found = check_pool(replace(LOW, qos="normal"), by_qos)
    assert one(found, "preempt.mode").severity is Severity.OK


@pytest.mark.parametrize(("grace", "signal_grace_s", "severity", "words"), [
    ("10", 10, Severity.OK, "GraceTime=10 s on partition low >= signal_grace_s=10 s"),
    ("10", 120, Severity.WARNING, "GraceTime=10 s on partition low is shorter than "
     "signal_grace_s=120 s"),
    ("0", 10, Severity.WARNING, "KillWait (5 s) later SIGKILL"),
])
def test_grace_time(grace: str, signal_grace_s: int, severity: Severity, words: str) -> None:
    f = facts(partitions=_part_line("low", PreemptMode="REQUEUE", GraceTime=grace))
    found = one(check_pool(replace(LOW, signal_grace_s=signal_grace_s), f), "preempt.grace")
    assert found.severity is severity
    assert words in found.message


@pytest.mark.parametrize(("ctld", "preempt", "version", "severity", "fix"), [
    ("preempt_send_user_signal", "", "22.05.8", Severity.OK, ""),
    ("enable_configless,preempt_send_user_signal", "", "22.05.8", Severity.OK, ""),
    ("", "send_user_signal,strict_order", "23.11.4", Severity.OK, ""),
    ("(null)", "", "22.05.8", Severity.WARNING,
     "add SlurmctldParameters=preempt_send_user_signal to slurm.conf"),
    ("(null)", "(null)", "23.11.4", Severity.WARNING, "add PreemptParameters=send_user_signal"),
])
def test_send_user_signal(ctld: str, preempt: str, version: str, severity: Severity,
                          fix: str) -> None:
    text = config_with("SlurmctldParameters", ctld)
    text = text.replace("SLURM_VERSION           = 22.05.8", f"SLURM_VERSION = {version}")
    text += f"PreemptParameters = {preempt}\n"
    found = one(check_pool(LOW, facts(config=text)), "preempt.signal")
    assert found.severity is severity
    assert fix in found.fix


# ---------------------------------------------------------------------- probe
def test_probe_argv() -> None:
    script, out = Path("/tmp/s/probe.sh"), Path("/runs/.dethpc-admin-probe/p-ab")
    argv = probe_argv(replace(POOL, qos="normal"), script, out, "/venv/bin/python", "ab")
    assert argv[:2] == ["--parsable", "--wait"]
    assert {"--wait", "--partition=debug", "--qos=normal", "--account=dethpc",
            "--output=/dev/null", "--job-name=dethpc-probe-ab"} <= set(argv)
    assert argv[-4:] == [str(script), str(out), "/venv/bin/python", "ab"]
    assert not any(a.startswith("--gres") for a in argv)
    assert "--gres=gpu:a100:1" in probe_argv(GPU, script, out, "py", "ab")
    assert "--gres=gpu:1" in probe_argv(replace(GPU, gpu_type=None), script, out, "py", "ab")
    site = replace(POOL, sbatch_args=("--exclude=n4", "--mem=1G", "--constraint=ib"))
    kept = probe_argv(site, script, out, "py", "ab")
    assert "--exclude=n4" in kept and "--constraint=ib" in kept and "--mem=1G" not in kept


@pytest.mark.parametrize(("outcome", "expected"), [
    (ProbeOutcome(1, "", "sbatch: error: Invalid qos specification", None, None),
     [(Severity.ERROR, "probe", "sbatch refused the probe job (exit 1): sbatch: error: "
       "Invalid qos specification")]),
    (ProbeOutcome(3, "42\n", "", None, None),
     [(Severity.ERROR, "probe.runs_root", "the compute node cannot write")]),
    (ProbeOutcome(0, "42\n", "", None, "3.11.9 0.1.0\n"),
     [(Severity.ERROR, "probe.runs_root", "this node does not see it")]),
    (ProbeOutcome(0, "42\n", "", "other-token n1\n", None),
     [(Severity.ERROR, "probe.runs_root", "this node does not see it")]),
    (ProbeOutcome(4, "42\n", "", "tok n3\n", "ModuleNotFoundError: No module named 'dethpc'\n"),
     [(Severity.OK, "probe.runs_root", "writable on n3 and visible here"),
      (Severity.ERROR, "probe.python", "/py cannot run dethpc on n3: ModuleNotFoundError")]),
    (ProbeOutcome(1, "42\n", "", "tok n3\n", None),
     [(Severity.ERROR, "probe", "probe job 42 ended with exit code 1")]),
    (ProbeOutcome(0, "42\n", "", "tok n3\n", "3.11.9 0.1.0\n"),
     [(Severity.OK, "probe.runs_root", "runs_root is writable on n3 and visible here"),
      (Severity.OK, "probe.python", "/py runs on n3 (Python 3.11.9, dethpc 0.1.0)")]),
])
def test_judge_probe(outcome: ProbeOutcome, expected: list[tuple[Severity, str, str]]) -> None:
    _judged(outcome, expected)


@pytest.mark.parametrize(("outcome", "expected"), [
    (ProbeOutcome(5, "42\n", "", "tok n3\n", "3.11.9 0.1.0\n", "apptainer: not found on PATH",
                  None, "apptainer", "/sif"),
     [(Severity.OK, "probe.runs_root", "writable on n3"), (Severity.OK, "probe.python", "n3"),
      (Severity.ERROR, "probe.container", "apptainer does not run on n3: apptainer: not found")]),
    (ProbeOutcome(6, "42\n", "", "tok n3\n", "3.11.9 0.1.0\n", "apptainer version 1.3\n",
                  None, "apptainer", "/sif"),
     [(Severity.OK, "probe.runs_root", "n3"), (Severity.OK, "probe.python", "n3"),
      (Severity.OK, "probe.container", "apptainer version 1.3 on n3"),
      (Severity.ERROR, "probe.image_cache", "n3 cannot read the image cache /sif")]),
    (ProbeOutcome(0, "42\n", "", "tok n3\n", "3.11.9 0.1.0\n", "apptainer version 1.3\n",
                  "other\n", "apptainer", "/sif"),
     [(Severity.OK, "probe.runs_root", "n3"), (Severity.OK, "probe.python", "n3"),
      (Severity.OK, "probe.container", "apptainer version 1.3 on n3"),
      (Severity.ERROR, "probe.image_cache", "sees another /sif than this node")]),
    (ProbeOutcome(0, "42\n", "", "tok n3\n", "3.11.9 0.1.0\n", "apptainer version 1.3\n",
                  "tok\n", "apptainer", "/sif"),
     [(Severity.OK, "probe.runs_root", "n3"), (Severity.OK, "probe.python", "n3"),
      (Severity.OK, "probe.container", "apptainer version 1.3 on n3"),
      (Severity.OK, "probe.image_cache", "n3 reads the image cache /sif")]),
    (ProbeOutcome(0, "42\n", "", "tok n3\n", "3.11.9 0.1.0\n", "0.31\n", None, "ch-run"),
     [(Severity.OK, "probe.runs_root", "n3"), (Severity.OK, "probe.python", "n3"),
      (Severity.OK, "probe.container", "0.31 on n3")]),
])
def test_judge_probe_of_a_container_runtime(outcome: ProbeOutcome,
                                            expected: list[tuple[Severity, str, str]]) -> None:
    _judged(outcome, expected)


def _judged(outcome: ProbeOutcome, expected: list[tuple[Severity, str, str]]) -> None:
    found = judge_probe("p", Path("/runs/x"), "/py", "tok", outcome)
    assert len(found) == len(expected)
    for f, (severity, check, words) in zip(found, expected, strict=True):
        assert (f.severity, f.check, f.pool) == (severity, check, "p")
        assert words in f.message
        assert bool(f.fix) is (severity is Severity.ERROR)


# ------------------------------------------------------------------------ cli
def _cli(tmp_path: Path, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(config, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "--cluster-config",
                           str(path), "admin", "check", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("config", "args", "code", "words"), [
    ("backend: local\n", [], 1, "uses the local backend; `admin check` compares a Slurm "
     "cluster config"),
    ("backend: slurm\npools: {a: {}, b: {}}\ndefault_pool: a\n", ["--pool", "c"], 2,
     "--pool: unknown pool 'c'; allowed: a, b"),
])
def test_cli_refuses_what_it_cannot_check(tmp_path: Path, config: str, args: list[str],
                                          code: int, words: str) -> None:
    proc = _cli(tmp_path, config, *args)
    assert proc.returncode == code
    assert words in " ".join(proc.stderr.split())  # rich wraps at the terminal width
    assert "Traceback" not in proc.stderr
