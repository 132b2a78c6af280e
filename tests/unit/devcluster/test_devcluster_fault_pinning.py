"""A fault's restart starts slurmctld and slurmdbd as ``up`` does: on the login CPUs a
scale cluster pins (``--login-cpus``), plainly when nothing is pinned -- so an injected
slurmctld restart does not move the login side off the core its CPU is metered on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dethpc.devcluster import profiles
from dethpc.devcluster.faults import ClusterFaults
from dethpc.devcluster.pinning import CpuPinning


class _Runner:
    def __init__(self) -> None:
        self.argvs: list[list[str]] = []

    def run(self, argv: list[str], **_: Any) -> SimpleNamespace:
        self.argvs.append(list(argv))
        return SimpleNamespace(returncode=0, stdout="", stderr="")


class _Cluster:
    def __init__(self, layout: Any) -> None:
        self.layout = layout
        self.runner = _Runner()
        self.daemon_runner = _Runner()

    @contextmanager
    def locked(self) -> Iterator[None]:
        yield

    def controller_up(self) -> bool:
        return True


@pytest.mark.parametrize(("pinning", "prefix"), [
    (CpuPinning(), []),
    (CpuPinning(login=(0,)), ["taskset", "-c", "0"]),
    (CpuPinning(login=(0, 1), nodes=(1,)), ["taskset", "-c", "0-1"]),
])
def test_restarts_keep_the_login_pinning(tmp_path: Path, pinning: CpuPinning,
                                         prefix: list[str]) -> None:
    lay = profiles.scale_layout(profiles.ScaleSpec(nodes=2, pinning=pinning), base=tmp_path)
    lay = replace(lay, slurm_etc=tmp_path / "etc")   # nothing under /etc is touched
    lay.slurm_etc.mkdir()
    lay.slurm_conf.write_text("ClusterName=devscale\nMinJobAge=300\n")
    cluster = _Cluster(lay)
    faults = ClusterFaults(cluster, timeout=5.0)  # type: ignore[arg-type]
    faults.restart_slurmctld(wait_nodes=False)
    faults.restart_slurmctld(min_job_age=5, wait_nodes=False)
    faults.start_slurmdbd()
    conf = str(tmp_path / "etc" / "slurm-fault.conf")
    assert cluster.daemon_runner.argvs == [[*prefix, "slurmctld"],
                                           [*prefix, "slurmctld", "-f", conf],
                                           [*prefix, "slurmdbd"]]
