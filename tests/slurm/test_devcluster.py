"""The dev cluster is what the rest of the Slurm tier assumes: three partitions
with the right preemption settings, working accounting, several nodes, and a
real preemption (user signal, requeue, SLURM_RESTART_COUNT incremented).

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

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


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
    from dethpc.devcluster.layout import DevClusterLayout

    return DevClusterLayout().pid_file("slurmctld").exists()


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
    assert "NodeName=n4 NodeHostname=h NodeAddr=127.0.0.1 Port=17004 CPUs=16" in conf
    assert "TmpFS=/x/tmp/%n" in conf
    assert "StoragePass=pw" in confs["slurmdbd.conf"]
