"""The dev cluster's site-realistic settings (dethpc.devcluster.site, layout):
the rendered slurm.conf / gres.conf say what docs/dev-cluster.md promises, and the
sacctmgr plan is empty on current records and adds exactly what is missing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dethpc.devcluster.layout import DevClusterLayout, render_configs
from dethpc.devcluster.site import (
    AccountingState,
    Association,
    GresSpec,
    SiteSpec,
    gres_conf_lines,
    member_names,
    parse_assocs,
    parse_qos,
    plan_accounting,
)

SITE = SiteSpec()
CLUSTER = "devcluster"


def rendered(**layout_kw: object) -> dict[str, str]:
    layout = DevClusterLayout(state_dir=Path("/x"), hostname="h", **layout_kw)  # type: ignore[arg-type]
    return {p.name: text for p, text in render_configs(layout, "pw").items()}


def conf_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


# ------------------------------------------------------------------ slurm.conf
@pytest.mark.parametrize("line", [
    "GresTypes=gpu",
    "SelectTypeParameters=CR_CPU_Memory",
    "DefMemPerCPU=1000",
    "MaxArraySize=1001",
    "EnforcePartLimits=ALL",
    "AccountingStorageEnforce=associations,limits,qos",
    "AccountingStorageTRES=gres/gpu",
    "SlurmctldParameters=preempt_send_user_signal",
    "NodeName=n1 NodeHostname=h NodeAddr=127.0.0.1 Port=7001 CPUs=16 RealMemory=16000 "
    "Gres=gpu:a100:2 State=UNKNOWN",
    "NodeName=n2 NodeHostname=h NodeAddr=127.0.0.1 Port=7002 CPUs=16 RealMemory=16000 "
    "Gres=gpu:a100:2 State=UNKNOWN",
    "NodeName=n3 NodeHostname=h NodeAddr=127.0.0.1 Port=7003 CPUs=16 RealMemory=16000 "
    "State=UNKNOWN",
    "PartitionName=low Nodes=n[1-4] MaxTime=1-00:00:00 DefaultTime=01:00:00 State=UP "
    "PriorityTier=1 PreemptMode=REQUEUE GraceTime=10",
])
def test_slurm_conf_has(line: str) -> None:
    assert line in conf_lines(rendered()["slurm.conf"])


def test_every_partition_has_the_time_limits_and_no_key_repeats() -> None:
    lines = conf_lines(rendered()["slurm.conf"])
    parts = [ln for ln in lines if ln.startswith("PartitionName=")]
    assert len(parts) == 3
    assert all("MaxTime=1-00:00:00 DefaultTime=01:00:00" in p for p in parts)
    keys = [ln.split("=", 1)[0] for ln in lines
            if not ln.startswith(("NodeName=", "PartitionName="))]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_gres_conf() -> None:
    assert conf_lines(rendered()["gres.conf"]) == [
        "AutoDetect=off", "NodeName=n1,n2 Name=gpu Type=a100 File=/x/dev/nvidia[0-1]"]


@pytest.mark.parametrize(("gres", "pattern"), [
    (GresSpec(), "/d/nvidia[0-1]"),
    (GresSpec(count=1), "/d/nvidia0"),
    (GresSpec(count=4, type="h100", nodes=("n3",)), "/d/nvidia[0-3]"),
])
def test_gres_file_pattern(gres: GresSpec, pattern: str) -> None:
    assert gres.file_pattern("/d") == pattern
    assert gres_conf_lines(gres, "/d")[1] == (
        f"NodeName={','.join(gres.nodes)} Name=gpu Type={gres.type} File={pattern}")
    assert len(gres.device_names()) == gres.count


def test_layout_paths_of_the_fake_gpus() -> None:
    layout = DevClusterLayout(state_dir=Path("/x"))
    assert layout.gpu_devices() == [Path("/x/dev/nvidia0"), Path("/x/dev/nvidia1")]
    assert layout.gres_conf == Path("/etc/slurm/gres.conf")
    assert layout.dev_dir in layout.directories()
    assert [layout.node_gres(n) for n in ("n1", "n2", "n3", "n4")] == [
        "gpu:a100:2", "gpu:a100:2", None, None]


@pytest.mark.parametrize(("kw", "message"), [
    ({"site": replace(SITE, gres=GresSpec(nodes=("n9",)))},
     "site.gres.nodes: ['n9'] are not nodes of the dev cluster"),
    ({"memory_mb": 8000}, "site.def_mem_per_cpu_mb: 1000 x 16 CPUs exceeds memory_mb=8000"),
])
def test_layout_refuses_an_inconsistent_site(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        DevClusterLayout(state_dir=Path("/x"), **kw)  # type: ignore[arg-type]


def test_site_names() -> None:
    assert SITE.default_account == "dethpc"
    assert SITE.limited_qos.name == "limited"
    assert SITE.limited_qos.limits() == {"MaxSubmitJobsPerUser": "2", "MaxJobsPerUser": "1"}
    assert SITE.account("ml-team").default_qos == "limited"
    with pytest.raises(ValueError, match="no account 'nope'.*allowed: dethpc, ml-team"):
        SITE.account("nope")


# ------------------------------------------------------------------ sacctmgr parsing
def test_parse_qos_and_assocs() -> None:
    assert parse_qos("normal||\nlimited|2|1\n\n") == {
        "normal": {"MaxSubmitJobsPerUser": "", "MaxJobsPerUser": ""},
        "limited": {"MaxSubmitJobsPerUser": "2", "MaxJobsPerUser": "1"}}
    assert parse_assocs("root||normal|\ndethpc||normal|normal\ndethpc|root|normal|\n"
                        "ml-team|bob|limited|limited\n") == (
        Association("root", "", frozenset({"normal"}), ""),
        Association("dethpc", "", frozenset({"normal"}), "normal"),
        Association("dethpc", "root", frozenset({"normal"}), ""),
        Association("ml-team", "bob", frozenset({"limited"}), "limited"))


# ------------------------------------------------------------------ planning
CURRENT_QOS = "normal||\nlimited|2|1\n"
CURRENT_ASSOCS = ("root||normal|\nroot|root|normal|\ndethpc||normal|normal\n"
                  "dethpc|root|normal|\nml-team||limited|limited\nml-team|root|limited|\n"
                  "ml-team|dethpc-user|limited|\n")


def state(qos: str = CURRENT_QOS, assocs: str = CURRENT_ASSOCS) -> AccountingState:
    return AccountingState(parse_qos(qos), parse_assocs(assocs))


ADD_LIMITED = ["add", "qos", "limited", "MaxSubmitJobsPerUser=2", "MaxJobsPerUser=1"]
ADD_ML = ["add", "account", "ml-team", "cluster=devcluster",
          "description=a team on the limited QoS", "organization=dethpc",
          "QosLevel=limited", "DefaultQOS=limited"]
ADD_DETHPC = ["add", "account", "dethpc", "cluster=devcluster", "description=dethpc tests",
              "organization=dethpc", "QosLevel=normal", "DefaultQOS=normal"]


def add_user(user: str, account: str, default: str = "dethpc") -> list[str]:
    return ["add", "user", user, f"account={account}", "cluster=devcluster",
            f"defaultaccount={default}"]


@pytest.mark.parametrize(("st", "members", "test_user", "expected"), [
    # current: nothing to do (so `up` on a running cluster runs no sacctmgr command)
    (state(), ["root"], "dethpc-user", []),
    (state(), ["root"], None, []),
    # a fresh database: Slurm's own QoS normal exists, nothing else
    (state("normal||\n", "root||normal|\nroot|root|normal|\n"), ["root"], "dethpc-user",
     [ADD_LIMITED, ADD_DETHPC, ADD_ML, add_user("root", "dethpc"),
      add_user("root", "ml-team"), add_user("dethpc-user", "ml-team", "ml-team")]),
    # the old dev cluster (account dethpc with root; no QoS limited, no ml-team)
    (state("normal||\n", "root||normal|\ndethpc||normal|\ndethpc|root|normal|\n"), ["root"],
     None, [ADD_LIMITED,
            ["modify", "account", "where", "name=dethpc", "cluster=devcluster", "set",
             "QosLevel=normal", "DefaultQOS=normal"],
            ADD_ML, add_user("root", "ml-team")]),
    # limits changed by hand (a live test that forgot to restore them)
    (state("normal||\nlimited|5|\n"), ["root"], None,
     [["modify", "qos", "where", "name=limited", "set", "MaxSubmitJobsPerUser=2",
       "MaxJobsPerUser=1"]]),
    # someone gave normal a limit: cleared with -1
    (state("normal|7|\nlimited|2|1\n"), [], None,
     [["modify", "qos", "where", "name=normal", "set", "MaxSubmitJobsPerUser=-1"]]),
    # a new member joins every account; the default account is the first one
    (state(), ["root", "alice", "root"], None,
     [add_user("alice", "dethpc"), add_user("alice", "ml-team")]),
    # ml-team's QoS list was widened by hand
    (state(assocs=CURRENT_ASSOCS.replace("ml-team||limited|", "ml-team||limited,normal|")),
     [], None, [["modify", "account", "where", "name=ml-team", "cluster=devcluster", "set",
                 "QosLevel=limited", "DefaultQOS=limited"]]),
])
def test_plan_accounting(st: AccountingState, members: list[str], test_user: str | None,
                         expected: list[list[str]]) -> None:
    assert plan_accounting(SITE, CLUSTER, st, member_names(members), test_user) == expected


def test_member_names() -> None:
    assert member_names(["root", " ", "", " bob ", "root", "bob"]) == ["root", "bob"]


@pytest.mark.parametrize(("conf", "settings", "expected"), [
    ("A=1\nMinJobAge=300\n", {"MinJobAge": "2"}, "A=1\nMinJobAge=2\n"),
    ("A=1\n", {"MaxBatchRequeue": "2"}, "A=1\nMaxBatchRequeue=2\n"),
    ("A=1\nslurmctldparameters=x\n", {"SlurmctldParameters": "rl_enable,rl_bucket_size=10"},
     "A=1\nSlurmctldParameters=rl_enable,rl_bucket_size=10\n"),
    ("#MinJobAge=1\nA=1", {"MinJobAge": "5"}, "#MinJobAge=1\nA=1\nMinJobAge=5\n"),
])
def test_with_settings(conf: str, settings: dict[str, str], expected: str) -> None:
    from dethpc.devcluster.faults import with_settings

    assert with_settings(conf, settings) == expected


def test_refused_rpcs_reads_one_uids_refusals_after_an_offset(tmp_path: Path) -> None:
    from dethpc.devcluster.faults import refused_rpcs

    log = tmp_path / "slurmctld.log"
    old = ("[2026-11-29T08:33:30.901] RPC rate limit exceeded by uid 1001 with "
           "REQUEST_PING from 127.0.0.1:1, telling to back off\n")
    log.write_text(old + (
        "[2026-11-29T08:37:45.705] RPC rate limit exceeded by uid 1001 with "
        "REQUEST_JOB_INFO from 127.0.0.1:41560, telling to back off\n"
        "[2026-11-29T08:37:45.800] RPC rate limit exceeded by uid 1002 with "
        "REQUEST_PING from 127.0.0.1:41561, telling to back off\n"
        "[2026-11-29T08:37:46.000] sched: Allocate JobId=5\n"))
    assert refused_rpcs(log, len(old), 1001) == ["REQUEST_JOB_INFO"]
    assert refused_rpcs(log, 0, 1001) == ["REQUEST_PING", "REQUEST_JOB_INFO"]
