"""Capture what a real Slurm prints for every read command dethpc runs, as golden files.

``python -m tests.golden.capture_slurm [--slurm 25.11] [--lane K]`` (root, the dev
cluster of that release and lane up, nothing else running on it) submits a fixed set
of jobs (running, a throttled array, held, completed, failed, cancelled; a comment
holding the field separator), waits until Slurm says each is where the scenario puts
it, then runs each command with dethpc's own argv (the builders and constants the
backend, the limits, the zero-config probe and ``admin check`` use: ``commands``
below) and writes its stdout to ``tests/golden/slurm/<release>/<name>.txt`` with a
``scenario.json`` (the jobs' ids and where the scenario put them, the argv of each
file, the version). tests/unit/backends/test_slurm_goldens.py parses every file with
dethpc's parsers and checks the scenario back, for each release captured.

Owns: the scenario and the list of captured commands. Must not: be imported by dethpc
or by a test that runs in CI (it needs root and an idle cluster; its output is
committed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dethpc.backends import slurm_actions, slurm_detect, slurm_limits, slurm_poll
from dethpc.backends import slurm_parse as sp
from dethpc.backends.base import JobState
from dethpc.backends.slurm_commands import SITE_QUERIES, accounting_queries
from dethpc.common.runner import CommandRunner
from dethpc.devcluster.lanes import lane_env, lane_layout
from dethpc.devcluster.releases import SlurmRelease
from dethpc.surfaces.admin import facts

HERE = Path(__file__).resolve().parent
USER = "root"
#: what each scenario job is submitted with (sbatch words after the common ones)
SCENARIO: dict[str, list[str]] = {
    "running": ["--comment=dethpc|golden run", "--wrap=srun sleep 600"],
    "array": ["--array=0-5%2", "--wrap=sleep 600"],
    "held": ["--hold", "--wrap=true"],
    "completed": ["--wrap=true"],
    "failed": ["--wrap=exit 3"],
    "cancelled": ["--wrap=sleep 600"],
}


def commands(jobs: dict[str, str], nodes: list[str], cluster: str) -> dict[str, list[str]]:
    """``{golden name: argv}``: every read command dethpc runs, with dethpc's own argv."""
    ids = list(jobs.values())
    names = [f"golden-{k}" for k in jobs]
    out = {
        "squeue_jobs": slurm_poll.squeue_argv(ids, None),
        "squeue_user": slurm_poll.squeue_argv(ids, USER),
        "squeue_names": slurm_poll.find_squeue_argv(names, USER),
        "sacct_jobs": slurm_poll.sacct_argv(ids),
        "sacct_names": slurm_poll.find_sacct_argv(names, USER),
        "sinfo_partitions": ["sinfo", "-h", "-o", sp.SINFO_FORMAT],
        "sinfo_detect": slurm_detect.SINFO_ARGV,
        "scontrol_ping": slurm_detect.PING_ARGV,
        "scontrol_version": ["scontrol", "--version"],
        "scontrol_job": ["scontrol", "-o", "show", "job", jobs["running"]],
        "scontrol_hostnames": ["scontrol", "show", "hostnames", f"{nodes[0]},{nodes[1]}"],
        "sdiag": ["sdiag"],
        # the hang watchdog's kill of a job's launched steps (slurm_actions)
        "squeue_steps": slurm_actions.steps_argv([jobs["running"], jobs["array"]]),
        # the node states a submit checks (slurm_submit), and the interactive tasks' and
        # TensorBoard's own squeue formats (surfaces/tasks)
        "sinfo_node_states": ["sinfo", "-h", "-N", "-o", "%T"],
        "squeue_task_state": ["squeue", "-h", "-j", jobs["running"], "-o", "%T"],
        "squeue_task_nodes": ["squeue", "-h", "-j", jobs["running"], "-o", "%N"],
        "squeue_task_where": ["squeue", "-h", "-j", jobs["running"], "-o", "%T|%N|%r"],
        "sacctmgr_user_assocs": slurm_limits.user_argv(USER),
        "sacctmgr_qos_limits": slurm_limits.QOS_ARGV,
        "sacctmgr_qos_names": slurm_limits.QOS_NAMES_ARGV,
        "sacctmgr_default_account": slurm_detect.account_argv(USER),
        "sacctmgr_default_qos": slurm_detect.default_qos_argv(USER, "dethpc"),
    }
    out.update({f"scontrol_{k}": v for k, v in SITE_QUERIES.items()})
    out.update({f"sacctmgr_{k}": v for k, v in accounting_queries(
        USER, cluster, facts.QOS_FORMAT, facts.ASSOC_FORMAT).items()})
    return out


def wait_for(what: str, ok: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise SystemExit(f"capture: timed out waiting for {what}")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.golden.capture_slurm")
    ap.add_argument("--slurm", default="22.05", choices=[r.value for r in SlurmRelease])
    ap.add_argument("--lane", type=int, default=1)
    args = ap.parse_args(argv)
    release = SlurmRelease.parse(args.slurm)
    layout = lane_layout(args.lane, release=release)
    env = {**os.environ, **lane_env(layout)}
    run = CommandRunner(timeout=60.0, retries=2, env=env, cwd="/tmp")
    out_dir = HERE / "slurm" / release.value
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs: dict[str, str] = {}
    common = ["sbatch", "--parsable", "--partition=debug", "--output=/dev/null", "--time=10"]
    try:
        for key, words in SCENARIO.items():
            res = run.run([*common, f"--job-name=golden-{key}", *words])
            jobs[key] = sp.parse_sbatch_parsable(res.stdout)
            if key == "running":
                (out_dir / "sbatch_parsable.txt").write_text(res.stdout)
        refused = run.run([*common, "--partition=nosuchpartition", "--wrap=true"],
                          check=False, retry=False)
        (out_dir / "sbatch_refused.txt").write_text(refused.stderr)

        def states() -> dict[str, str]:
            text = run.run(slurm_poll.sacct_argv(list(jobs.values()))).stdout
            return {i.ref: i.state for i in sp.parse_sacct(text)}

        wait_for("the running job to start",
                 lambda: states().get(jobs["running"]) is JobState.RUNNING)
        wait_for("the running job's srun step", lambda: f"{jobs['running']}.0" in run.run(
            slurm_actions.steps_argv([jobs["running"]])).stdout.split())
        run.run(["scancel", jobs["cancelled"]])
        wait_for("the finished jobs' records", lambda: {
            states().get(jobs[k]) for k in ("completed", "failed", "cancelled")}
            == {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})
        wait_for("two array tasks running", lambda: sum(
            1 for i in sp.parse_squeue(run.run(slurm_poll.squeue_argv([jobs["array"]],
                                                                      None)).stdout)
            if i.state is JobState.RUNNING) == 2)
        config = sp.parse_key_values(run.run(slurm_detect.CONFIG_ARGV).stdout)
        argvs = commands(jobs, layout.node_names, config.get("ClusterName", ""))
        for name, cmd in argvs.items():
            res = run.run(cmd, check=False, retry=False)
            (out_dir / f"{name}.txt").write_text(res.stdout)
        version = run.run(["scontrol", "--version"]).stdout.strip()
        (out_dir / "scenario.json").write_text(json.dumps({
            "release": release.value, "version": version, "cluster": layout.cluster_name,
            "nodes": layout.node_names, "user": USER, "jobs": jobs,
            "scenario": SCENARIO, "argv": {"sbatch": common, **argvs},
            "captured": time.strftime("%Y-%m-%d"),
            "how": "python -m tests.golden.capture_slurm --slurm " + release.value,
        }, indent=1) + "\n")
    finally:
        if jobs:
            run.run(["scancel", *jobs.values()], check=False, retry=False)
    print(f"{len(argvs) + 2} golden outputs of {version} -> {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
