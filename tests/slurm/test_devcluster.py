"""The dev cluster is what the rest of the Slurm tier assumes: three partitions
with the right preemption settings, working accounting, several nodes, and a
real preemption (user signal, requeue, SLURM_RESTART_COUNT incremented). And it
looks like a site (dethpc.devcluster.site): typed fake GPUs through GRES that
Slurm hands to jobs itself, memory as a consumable, partition time limits,
Slurm's default MaxArraySize, and a limited QoS whose per-user limits bite for
a non-root user while root keeps its unlimited defaults.

Every wait polls with a generous timeout; nothing asserts on durations.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from dethpc.devcluster.site import SiteSpec
from dethpc.devcluster.users import ClusterUser

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
SITE = SiteSpec()


def test_partitions_and_preemption_settings(slurm_cluster: Any) -> None:
    parts = slurm_cluster.partitions()
    assert {"debug", "low", "high"} <= set(parts)
    assert parts["debug"]["Default"] == "YES"
    assert parts["debug"]["PreemptMode"] == "OFF"
    assert parts["low"]["PreemptMode"] == "REQUEUE"
    assert parts["low"]["GraceTime"] == "10"
    assert parts["high"]["PreemptMode"] == "OFF"
    tiers = {name: int(parts[name]["PriorityTier"]) for name in ("debug", "low", "high")}
    assert tiers["high"] > tiers["low"]
    assert tiers["debug"] <= tiers["low"]  # debug never preempts low
    config = slurm_cluster.run(["scontrol", "show", "config"])
    assert "preempt/partition_prio" in config
    assert "preempt_send_user_signal" in config


def test_accounting_answers(slurm_cluster: Any) -> None:
    job = slurm_cluster.sbatch("-p", "debug", "-o", "/dev/null", "--wrap", "true")
    rows = slurm_cluster.wait_for(
        f"sacct to report job {job} finished",
        lambda: [r for r in slurm_cluster.sacct(job) if r["State"] in FINISHED],
        timeout=120,
    )
    assert rows[0]["State"] == "COMPLETED"


def test_array_runs_across_nodes(slurm_cluster: Any) -> None:
    # 8 CPUs per task: at most 2 fit on a 16-CPU node, so 8 tasks need several nodes.
    job = slurm_cluster.sbatch("-p", "debug", "--array=0-7", "-c", "8", "-o", "/dev/null",
                               "--wrap", "sleep 2")

    def finished() -> list[dict[str, str]] | None:
        rows = slurm_cluster.sacct(job)
        done = [r for r in rows if r["State"] in FINISHED]
        return done if len(done) == 8 else None

    rows = slurm_cluster.wait_for(f"8 tasks of array {job} to finish", finished, timeout=240)
    assert {r["State"] for r in rows} == {"COMPLETED"}
    nodes = {r["NodeList"] for r in rows}
    assert len(nodes) > 1, nodes


def test_low_job_is_preempted_signalled_and_requeued(slurm_cluster: Any, tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    log = tmp_path / "events.log"
    script = tmp_path / "low.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        log={log}
        echo "start restart=${{SLURM_RESTART_COUNT:-0}}" >> "$log"
        trap 'echo "usr2 restart=${{SLURM_RESTART_COUNT:-0}}" >> "$log"' USR2
        trap 'echo "term restart=${{SLURM_RESTART_COUNT:-0}}" >> "$log"; exit 143' TERM
        for _ in $(seq 900); do sleep 1; done
        """))
    low = slurm_cluster.sbatch(
        "-p", "low", "-c", "1", "--requeue", "--signal=B:USR2@30", "--open-mode=append",
        "-J", "preempt-me", "-o", str(tmp_path / "low-%j.out"), str(script))
    high: str | None = None
    try:
        node = slurm_cluster.wait_for(
            f"low job {low} to run",
            lambda: slurm_cluster.squeue_field(low, "%T|%N").startswith("RUNNING|")
            and slurm_cluster.squeue_field(low, "%N"),
        )
        slurm_cluster.wait_for("the low job's first start", lambda: log.exists()
                               and "start restart=0" in log.read_text())
        # A high job that needs the whole node where the low job runs.
        high = slurm_cluster.sbatch("-p", "high", "-w", node, "--exclusive", "-o", "/dev/null",
                                    "-J", "preemptor", "--wrap", "sleep 5")
        slurm_cluster.wait_for("USR2 at preemption",
                               lambda: "usr2 restart=0" in log.read_text())
        slurm_cluster.wait_for("the low job to be requeued and start again",
                               lambda: "start restart=1" in log.read_text(), timeout=300)
        assert int(slurm_cluster.show_job(low)["Restarts"]) >= 1
        high_rows = slurm_cluster.sacct(high, "JobID,State")
        assert high_rows, "the high job left no accounting record"
    finally:
        slurm_cluster.cancel(low, *([high] if high else []))
    events = log.read_text().splitlines()
    assert events.index("usr2 restart=0") < events.index("start restart=1"), events


def _is_our_dev_cluster() -> bool:
    from dethpc.devcluster.lanes import current_layout

    return current_layout().pid_file("slurmctld").exists()


def test_status_command_reports_up(slurm_cluster: Any) -> None:
    if not _is_our_dev_cluster():
        pytest.skip("the reachable Slurm is not this machine's dev cluster")
    res = subprocess.run([sys.executable, "-m", "dethpc.devcluster", "status"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "cluster is UP" in res.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="`up` needs root")
def test_up_again_is_a_no_op(slurm_cluster: Any) -> None:
    if not _is_our_dev_cluster():
        pytest.skip("the reachable Slurm is not this machine's dev cluster")
    before = slurm_cluster.run(["scontrol", "show", "config"])
    res = subprocess.run([sys.executable, "-m", "dethpc.devcluster", "up"],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    after = slurm_cluster.run(["scontrol", "show", "config"])
    # same controller: BOOT_TIME unchanged, so nothing was restarted
    boot = [line for line in before.splitlines() if line.startswith("BOOT_TIME")]
    assert boot and boot == [ln for ln in after.splitlines() if ln.startswith("BOOT_TIME")]


def test_rendered_config_has_the_preemption_settings() -> None:
    from dethpc.devcluster.layout import DevClusterLayout, render_configs

    layout = DevClusterLayout(state_dir=Path("/x"), hostname="h")
    confs = {p.name: text for p, text in render_configs(layout, "pw").items()}
    conf = confs["slurm.conf"]
    assert "SlurmctldParameters=preempt_send_user_signal" in conf
    assert not [ln for ln in conf.splitlines() if ln.startswith("PreemptParameters")]
    assert "NodeName=n4 NodeHostname=h NodeAddr=127.0.0.1 Port=7004 CPUs=16" in conf
    assert "TmpFS=/x/tmp/%n" in conf
    assert "StoragePass=pw" in confs["slurmdbd.conf"]


# ------------------------------------------------------------------ a site, not a tidy one
def config(slurm_cluster: Any) -> dict[str, str]:
    out = slurm_cluster.run(["scontrol", "show", "config"])
    return {k.strip(): v.strip() for k, _, v in
            (line.partition("=") for line in out.splitlines()) if v}


def test_site_settings_in_the_live_config(slurm_cluster: Any) -> None:
    conf = config(slurm_cluster)
    assert conf["MaxArraySize"] == "1001"
    assert conf["SelectTypeParameters"] == "CR_CPU_MEMORY"
    assert conf["DefMemPerCPU"] == "1000"
    assert conf["GresTypes"] == "gpu"
    assert set(conf["AccountingStorageEnforce"].split(",")) == {"associations", "limits", "qos"}
    assert conf["EnforcePartLimits"] == "ALL"
    parts = slurm_cluster.partitions()
    assert {parts[p]["MaxTime"] for p in ("debug", "low", "high")} == {"1-00:00:00"}


def test_gpus_are_typed_gres_on_two_nodes(slurm_cluster: Any) -> None:
    out = slurm_cluster.run(["sinfo", "-h", "-N", "-o", "%N|%G|%m"])
    rows = {n: (g, m) for n, g, m in (line.split("|") for line in set(out.split()))}
    n1, n2, n3, n4 = slurm_cluster.nodes      # n1..n4 in lane 1, l2n1..l2n4 in lane 2
    assert {n: g for n, (g, _) in rows.items()} == {
        n1: "gpu:a100:2", n2: "gpu:a100:2", n3: "(null)", n4: "(null)"}
    assert {m for _, m in rows.values()} == {"16000"}


def wait_finished(slurm_cluster: Any, job: str) -> dict[str, str]:
    rows = slurm_cluster.wait_for(
        f"job {job} to finish",
        lambda: [r for r in slurm_cluster.sacct(job) if r["State"] in FINISHED], timeout=180)
    return rows[0]


def test_gpu_job_gets_its_devices_from_slurm(slurm_cluster: Any, tmp_path: Path) -> None:
    out = tmp_path / "gpu.out"
    job = slurm_cluster.sbatch(
        "-p", "debug", "--gpus-per-node=a100:1", "-o", str(out), "--wrap",
        "echo node=$SLURMD_NODENAME cvd=${CUDA_VISIBLE_DEVICES-unset} "
        "gpus=${SLURM_JOB_GPUS-unset}")
    assert wait_finished(slurm_cluster, job)["State"] == "COMPLETED"
    fields = dict(w.split("=", 1) for w in out.read_text().split())
    assert fields["node"] in slurm_cluster.layout.site.gres.nodes
    assert fields["node"] in slurm_cluster.nodes[:2]
    assert fields["cvd"] in {"0", "1"} and fields["gpus"] == fields["cvd"], fields
    shown = slurm_cluster.show_job(job)
    assert "gres/gpu:a100=1" in shown["TRES"] or "gres/gpu=1" in shown["TRES"], shown["TRES"]
    # DefMemPerCPU: a job that asks for no memory gets 1000 MB per CPU
    assert shown["MinMemoryCPU"] == "1000M", shown


def test_root_keeps_unlimited_defaults(slurm_cluster: Any) -> None:
    job = slurm_cluster.sbatch("-o", "/dev/null", "--wrap", "true")
    shown = slurm_cluster.show_job(job)
    assert (shown["Partition"], shown["Account"], shown["QOS"]) == ("debug", "dethpc", "normal")
    assert wait_finished(slurm_cluster, job)["State"] == "COMPLETED"


@pytest.mark.parametrize(("args", "refusal"), [
    (["--gpus-per-node=a100:2", "--mem=16000M", "-c", "16"], None),  # the most one node has
    (["-p", "debug", "--time=1-00:00:00"], None),
    (["--account=ml-team"], None),                                  # root is in ml-team too
    (["--array=0-1000"], None),
    (["--gpus-per-node=a100:3"], "Requested node configuration is not available"),
    (["--gpus-per-node=h100:1"], "Requested node configuration is not available"),
    (["--mem=16001M"], "Requested node configuration is not available"),
    (["-c", "2", "--mem-per-cpu=8001M"], "Requested node configuration is not available"),
    (["-p", "debug", "--time=1-00:00:01"], "Requested time limit is invalid"),
    (["--array=0-1001"], "Invalid job array specification"),
    (["--account=ml-team", "--qos=normal"], "Invalid qos specification"),
])
def test_what_sbatch_test_only_accepts_and_refuses(slurm_cluster: Any, args: list[str],
                                                   refusal: str | None) -> None:
    res = slurm_cluster.runner.run(["sbatch", "--test-only", *args, "--wrap", "true"],
                                   check=False, retry=False)
    text = res.stdout + res.stderr
    if refusal is None:
        assert res.returncode == 0, text
    else:
        assert res.returncode != 0 and refusal in text, text


def user_jobs(slurm_cluster: Any, user: ClusterUser) -> dict[str, str]:
    """``{job: pending reason or RUNNING}`` of ``user``'s jobs in squeue."""
    out = slurm_cluster.runner.run(["squeue", "-h", "-u", user.name, "-o", "%i|%T|%r"]).stdout
    return {j: (s if s != "PENDING" else r) for j, s, r in
            (line.strip().split("|") for line in out.splitlines() if line.strip())}


def test_limited_qos_refuses_the_submission_over_the_user_limit(
        slurm_cluster: Any, cluster_user: ClusterUser, user_tmp: Path) -> None:
    qos = SITE.limited_qos
    assert qos.max_submit_jobs_per_user == 2 and qos.max_jobs_per_user == 1
    assert not user_jobs(slurm_cluster, cluster_user), "the test user has jobs left over"
    jobs: list[str] = []
    try:
        for i in range(qos.max_submit_jobs_per_user):
            res = slurm_cluster.sbatch_as(
                cluster_user, f"--chdir={user_tmp}", "-o", f"job{i}.out", "--wrap",
                f"echo job {i} as $(id -un) > done{i}; sleep 600")
            assert res.returncode == 0, res.stderr
            jobs.append(res.stdout.strip().split(";")[0])
        shown = slurm_cluster.show_job(jobs[0])
        assert (shown["Account"], shown["QOS"]) == (SITE.test_user_account, qos.name)
        # MaxJobsPerUser=1: one runs (writing into the user's dir), the other waits
        slurm_cluster.wait_for("one job running, one held by the per-user job limit",
                               lambda: sorted(user_jobs(slurm_cluster, cluster_user).values())
                               == ["QOSMaxJobsPerUserLimit", "RUNNING"])
        running = next(j for j, s in user_jobs(slurm_cluster, cluster_user).items()
                       if s == "RUNNING")
        done = user_tmp / f"done{jobs.index(running)}"
        slurm_cluster.wait_for("the running job's file", done.exists)
        assert done.stat().st_uid == cluster_user.uid
        assert f"as {cluster_user.name}" in done.read_text()
        # MaxSubmitJobsPerUser=2: the third submission is refused by Slurm at once
        res = slurm_cluster.sbatch_as(cluster_user, f"--chdir={user_tmp}", "-o", "/dev/null",
                                      "--wrap", "true")
        assert res.returncode != 0, res.stdout
        assert "QOSMaxSubmitJobPerUserLimit" in res.stderr, res.stderr
        # root is not held to the limited QoS by default
        root = slurm_cluster.sbatch("-o", "/dev/null", "--wrap", "true")
        assert slurm_cluster.show_job(root)["QOS"] == "normal"
    finally:
        slurm_cluster.cancel(*jobs)
    slurm_cluster.wait_for("the test user's jobs to leave the queue",
                           lambda: not user_jobs(slurm_cluster, cluster_user))


def test_a_node_crash_kills_what_left_its_slurmstepd_too(slurm_cluster: Any,
                                                         tmp_path: Path) -> None:
    """``crash_node`` kills every process of the node, also one a job started that is no
    longer below its slurmstepd (double-forked, so reparented to init): on a real node
    it dies with the rest. Seen in CI: a requeued job's old ``srun`` that outlived the
    crash SIGKILLed the new run's step of the same id."""
    from dethpc.devcluster.cluster import DevCluster
    from dethpc.devcluster.nodes import crash_node, revive_node

    node = slurm_cluster.layout.nodes[-1].name
    pid_file = tmp_path / "escaped.pid"
    job = slurm_cluster.sbatch(
        "-p", "debug", "-w", node, "--no-requeue", "-o", "/dev/null", "--wrap",
        f"setsid sh -c 'sleep 600 & echo $! > {pid_file}' ; sleep 600")
    pid = int(slurm_cluster.wait_for(
        "the job's escaped process", lambda: pid_file.exists()
        and pid_file.read_text().strip() or None, timeout=120))
    assert Path(f"/proc/{pid}").exists()
    try:
        crash = crash_node(DevCluster(), node, reason="dethpc test: escaped process")
        assert pid in crash.killed, crash.killed
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    finally:
        revive_node(DevCluster(), node)
        subprocess.run(["scancel", job], check=False)
