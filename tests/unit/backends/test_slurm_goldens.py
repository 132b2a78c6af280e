"""dethpc's parsers on what each supported Slurm release really printed.

The files under tests/golden/slurm/<release>/ were captured by
``python -m tests.golden.capture_slurm --slurm <release>`` on the dev cluster of that
release: a fixed scenario of jobs, then every read command dethpc runs, with dethpc's
own argv (``scenario.json`` records both). Each test parses one command's output with
the parser dethpc uses on it and checks the scenario back, for every release.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dethpc.backends import slurm_detect, slurm_limits
from dethpc.backends import slurm_parse as sp
from dethpc.backends.base import JobState
from dethpc.devcluster.releases import SlurmRelease
from dethpc.surfaces.admin import facts
from tests.golden.capture_slurm import commands

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "slurm"
RELEASES = [r.value for r in SlurmRelease]


class Golden:
    def __init__(self, release: str) -> None:
        self.dir = GOLDEN / release
        self.scenario: dict[str, Any] = json.loads((self.dir / "scenario.json").read_text())
        self.jobs: dict[str, str] = self.scenario["jobs"]

    def text(self, name: str) -> str:
        return (self.dir / f"{name}.txt").read_text()


@pytest.fixture(params=RELEASES)
def golden(request: pytest.FixtureRequest) -> Golden:
    return Golden(request.param)


def test_every_supported_release_was_captured_with_todays_commands() -> None:
    for release in RELEASES:
        g = Golden(release)
        assert g.scenario["release"] == release
        assert g.scenario["version"].split()[-1].startswith(release), g.scenario["version"]
        # the argv dethpc runs today are the ones captured: a changed format needs a new capture
        now = commands(g.jobs, g.scenario["nodes"], g.scenario["cluster"])
        captured = {k: v for k, v in g.scenario["argv"].items() if k != "sbatch"}
        assert now == captured, "re-run python -m tests.golden.capture_slurm for " + release
        for name in now:
            assert (g.dir / f"{name}.txt").is_file(), name


def test_squeue_every_job_where_the_scenario_put_it(golden: Golden) -> None:
    j = golden.jobs
    for name in ("squeue_jobs", "squeue_user", "squeue_names"):
        infos = {i.ref: i for i in sp.parse_squeue(golden.text(name))}
        assert infos[j["running"]].state is JobState.RUNNING, name
        # the comment holds the field separator and a space: it comes back whole
        assert infos[j["running"]].comment == "dethpc|golden run", name
        assert infos[j["running"]].name == "golden-running"
        assert infos[j["running"]].nodes in golden.scenario["nodes"]
        assert (infos[j["held"]].state, infos[j["held"]].reason) == (JobState.PENDING,
                                                                     "JobHeldUser")
        tasks = {ref: i for ref, i in infos.items() if ref.startswith(f"{j['array']}_")}
        # -r: every task on its own line, two running (the %2 throttle), four pending
        assert sorted(tasks) == [f"{j['array']}_{k}" for k in range(6)], name
        states = sorted(i.state.value for i in tasks.values())
        assert states == ["pending"] * 4 + ["running"] * 2, name
        assert {tasks[f"{j['array']}_{k}"].reason for k in range(2, 6)} == {"JobArrayTaskLimit"}
        assert all(i.qos == "normal" and i.account == "dethpc" for i in infos.values()
                   if i.name.startswith("golden-"))


def test_squeue_keeps_the_finished_jobs_with_their_exit(golden: Golden) -> None:
    j = golden.jobs
    infos = {i.ref: i for i in sp.parse_squeue(golden.text("squeue_jobs"))}
    assert infos[j["completed"]].state is JobState.COMPLETED
    assert (infos[j["failed"]].state, infos[j["failed"]].exit_code) == (JobState.FAILED, 3)
    assert infos[j["cancelled"]].state is JobState.CANCELLED


@pytest.mark.parametrize("name", ["sacct_jobs", "sacct_names"])
def test_sacct_every_job_where_the_scenario_put_it(golden: Golden, name: str) -> None:
    j = golden.jobs
    infos = {i.ref: i for i in sp.parse_sacct(golden.text(name))}
    assert (infos[j["completed"]].state, infos[j["completed"]].exit_code) == (
        JobState.COMPLETED, 0)
    assert (infos[j["failed"]].state, infos[j["failed"]].exit_code) == (JobState.FAILED, 3)
    # "CANCELLED by 0" is one state
    assert infos[j["cancelled"]].state is JobState.CANCELLED
    assert infos[j["running"]].state is JobState.RUNNING
    assert infos[f"{j['array']}_0"].state is JobState.RUNNING
    if name == "sacct_jobs":  # by id; by name (--starttime) a job never eligible is left out
        assert infos[j["held"]].state is JobState.PENDING
        # the pending tasks are one record (``_[2-5%2]``), read as each of its tasks
        assert {infos[f"{j['array']}_{k}"].state for k in range(2, 6)} == {JobState.PENDING}


def test_sbatch_answers(golden: Golden) -> None:
    assert sp.parse_sbatch_parsable(golden.text("sbatch_parsable")) == golden.jobs["running"]
    refusal = sp.sbatch_refusal(golden.text("sbatch_refused"))
    assert "partition" in refusal.lower() and "nosuchpartition" in \
        golden.text("sbatch_refused") + refusal


def test_scontrol_config_version_ping_job_hostnames(golden: Golden) -> None:
    config = sp.parse_key_values(golden.text("scontrol_config"))
    assert config["ClusterName"] == golden.scenario["cluster"]
    assert config["PreemptType"] == "preempt/partition_prio"
    assert config["AccountingStorageType"] == "accounting_storage/slurmdbd"
    major, minor = (int(x) for x in golden.scenario["release"].split("."))
    assert sp.parse_version(golden.text("scontrol_version")) == (major, minor)
    assert " UP" in golden.text("scontrol_ping").upper()
    job = dict(w.split("=", 1) for w in golden.text("scontrol_job").split() if "=" in w)
    assert job["JobId"] == golden.jobs["running"] and job["JobState"] == "RUNNING"
    assert job["StdOut"] == "/dev/null"  # what detached.job_outputs reads
    assert golden.text("scontrol_hostnames").split() == golden.scenario["nodes"][:2]


def test_partitions_and_nodes_as_admin_check_reads_them(golden: Golden) -> None:
    parts = facts.parse_partitions(golden.text("scontrol_partitions"))
    assert set(parts) >= {"debug", "low", "high"}
    assert parts["debug"].default and parts["low"].preempt_mode == "REQUEUE"
    assert parts["low"].grace_time_s == 10 and parts["debug"].max_time_s == 86400
    assert parts["debug"].default_time_s == 3600
    nodes = {n.name: n for n in facts.parse_nodes(golden.text("scontrol_nodes"))}
    assert sorted(nodes) == golden.scenario["nodes"]
    first = nodes[golden.scenario["nodes"][0]]
    assert first.cpus == 16 and first.gpus("a100") == 2 and first.usable
    assert nodes[golden.scenario["nodes"][3]].gpus() == 0


def test_sinfo_as_the_backend_and_the_zero_config_probe_read_it(golden: Golden) -> None:
    parts = sp.parse_sinfo(golden.text("sinfo_partitions"))
    assert set(parts) >= {"debug", "low", "high"}
    assert parts["debug"].nodes == 4 and parts["debug"].time_limit_s == 86400
    assert parts["debug"].nodes_fitting(16, 2) == 2
    default = slurm_detect.default_partition(golden.text("sinfo_detect"))
    assert default is not None and default.name == "debug"


def test_accounting_as_the_limits_and_admin_check_read_it(golden: Golden) -> None:
    user = golden.scenario["user"]
    assocs = slurm_limits.parse_user_assocs(golden.text("sacctmgr_user_assocs"), user)
    assert assocs.default_account == "dethpc" and assocs.find("dethpc", None) is not None
    limits = slurm_limits.parse_qos_limits(golden.text("sacctmgr_qos_limits"))
    assert limits["limited"].max_submit_per_user == 2
    assert limits["limited"].max_jobs_per_user == 1
    assert {"normal", "limited"} <= slurm_limits.parse_qos_names(
        golden.text("sacctmgr_qos_names"))
    qos = facts.parse_qos(golden.text("sacctmgr_qos"))
    assert qos["limited"].max_submit_per_user == 2
    assert "dethpc" in facts.parse_first_column(golden.text("sacctmgr_account"))
    rows = facts.parse_assocs(golden.text("sacctmgr_assoc"))
    assert any(a.account == "dethpc" and a.user == user for a in rows)
    assert golden.text("sacctmgr_default_account").strip() == "dethpc"


def test_the_tasks_and_the_submit_checks_own_formats(golden: Golden) -> None:
    node = golden.scenario["nodes"][0]
    assert golden.text("squeue_task_state").strip() == "RUNNING"
    assert golden.text("squeue_task_nodes").strip() == node
    state, nodes, _reason = golden.text("squeue_task_where").strip().split("|")
    assert (state, nodes) == ("RUNNING", node)
    states = golden.text("sinfo_node_states").split()
    assert len(states) == 12 and set(states) <= {"idle", "mixed", "allocated"}


def test_sdiag_backlog(golden: Golden) -> None:
    backlog = sp.parse_dbd_backlog(golden.text("sdiag"))
    assert backlog is not None and backlog >= 0
    assert re.search(r"Server thread count:\s*\d+", golden.text("sdiag"))


#: commands that change something (sbatch, scancel, scontrol requeue/update ...): their
#: answers are exit codes and sbatch's, captured above; the others read and are parsed
_ACTIONS = {("scontrol", "requeue"), ("scontrol", "update"), ("scontrol", "hold"),
            ("scontrol", "release"), ("scontrol", "shutdown"), ("scontrol", "reconfigure"),
            ("scontrol", "top")}
_READERS = {"squeue", "sacct", "sinfo", "sdiag", "sacctmgr", "scontrol"}


def _read_commands(argvs: list[list[str]]) -> set[tuple[str, str, str]]:
    """(command, its subcommand for scontrol/sacctmgr, its output format) of each argv;
    ``X`` stands for a value the source computes (a constant's name, an f-string)."""
    out = set()
    for argv in argvs:
        words = [w for w in argv[1:] if not w.startswith("-")]
        # scontrol's subcommand; sacctmgr's entity (``show user``: user)
        at = {"scontrol": 0, "sacctmgr": 1}.get(argv[0])
        sub = words[at] if at is not None and len(words) > at else ""
        fmt = ""
        for k, w in enumerate(argv):
            if w in ("-o", "-O", "--format") and k + 1 < len(argv) and argv[0] != "scontrol":
                fmt = argv[k + 1]
            elif w.startswith("format=") or w.startswith("--format="):
                fmt = w.split("=", 1)[1]
        if not fmt and "X" in argv:  # an f-string may hold the format: any will do
            fmt = "X"
        out.add((argv[0], sub, fmt))
    return out


def test_every_read_command_in_dethpc_has_a_golden() -> None:
    """Found in dethpc's source, not listed by hand: every list literal that starts with a
    Slurm read command, with its subcommand and output format (the in-job templates'
    bash is issue 36's)."""
    import ast

    found: list[list[str]] = []
    for path in (Path(__file__).resolve().parents[3] / "dethpc").rglob("*.py"):
        if "devcluster" in path.parts:
            continue  # the dev cluster's own set-up commands are not dethpc's reads
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant) \
                    and node.elts[0].value in _READERS:
                found.append([e.value if isinstance(e, ast.Constant) and isinstance(e.value, str)
                              else "X" for e in node.elts])
    # no path depends on --json/--yaml, whose schemas change with every release
    assert not [a for a in found if {"--json", "--yaml"} & set(a)]
    in_source = {c for c in _read_commands(found) if c[:2] not in _ACTIONS}
    g = Golden(RELEASES[0])
    captured = _read_commands([v for k, v in g.scenario["argv"].items() if k != "sbatch"])
    assert len(in_source) > 10, "the scan found too little: it is broken"
    missing = [c for c in in_source
               if not any(c[:2] == k[:2] and c[2] in (k[2], "X") for k in captured)]
    assert not missing, f"no golden output for {sorted(missing)}"


def test_the_launched_steps_of_a_running_job(golden: Golden) -> None:
    """``squeue --steps`` (the hang watchdog's kill of a hung job's steps): the running
    job's srun step, never a batch shell (KILL to it would end the job's record)."""
    from dethpc.backends.slurm_actions import launched_steps

    steps = launched_steps(golden.text("squeue_steps"))
    assert f"{golden.jobs['running']}.0" in steps, steps
    assert not [s for s in steps if s.endswith((".batch", ".extern"))], steps
    assert ".batch" in golden.text("squeue_steps")   # the batch steps were there to leave out
