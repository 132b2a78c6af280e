"""The Slurm tier: every test under tests/slurm/ runs against the real dev cluster.

Owns: applying the ``slurm`` marker to everything in this directory, and the
session fixture ``slurm_cluster`` (a ``SlurmCluster`` with small helpers to
submit jobs and poll their state, and ``layout``: the layout of the lane's dev
cluster this process is bound to, with its node names). Also ``cluster_user``
(the site's non-root test user, for tests of per-user limits, which root may be
exempt from), ``user_tmp`` (a directory that user owns: pytest's ``tmp_path`` is
not reachable for it), ``user_python`` (how that user runs this checkout's
Python) and ``ds_harness`` (the DeepSpeed tests' daemon home, skipped without
deepspeed).
Must not: choose the cluster (which lane's cluster a process uses, ``SLURM_CONF``
and the rest, is bound before any test runs in tests/conftest.py, with the
reachability rules: skip locally, fail under CI=true, optional auto-start with
DETHPC_TEST_START_CLUSTER=1).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

from dethpc.common.runner import CommandResult, CommandRunner
from dethpc.devcluster.lanes import current_layout, lane_layout
from dethpc.devcluster.layout import DevClusterLayout
from dethpc.devcluster.users import ClusterUser, ensure_user, user_dir

if TYPE_CHECKING:
    from tests.slurm.fixtures.harness import DaemonHarness

HERE = Path(__file__).parent.resolve()
T = TypeVar("T")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.slurm)


@dataclass
class SlurmCluster:
    """Thin helpers over the Slurm CLI for tests (never a mock of Slurm)."""

    runner: CommandRunner = field(default_factory=lambda: CommandRunner(timeout=30.0))
    #: the dev cluster of this process's lane (its node names, ports, site settings)
    layout: DevClusterLayout = field(default_factory=current_layout)

    @property
    def nodes(self) -> list[str]:
        """The lane's node names (``n1..n4`` in lane 1, ``l2n1..l2n4`` in lane 2 ...)."""
        return self.layout.node_names

    def lane_nodes_in(self, text: str) -> str:
        """``text`` (a site config written for lane 1's cluster) with lane 1's node names
        (``n1``..``n4``) replaced by this lane's: the same config on this lane's cluster."""
        first = lane_layout(1).node_names
        names = dict(zip(first, self.nodes, strict=True))
        return re.sub(r"\b(" + "|".join(map(re.escape, first)) + r")\b",
                      lambda m: names[m.group(1)], text)

    def run(self, argv: Sequence[str]) -> str:
        return self.runner.run(list(argv)).stdout

    def sbatch(self, *args: str) -> str:
        """Submit; return the job id (``--parsable`` is added)."""
        return self.run(["sbatch", "--parsable", *args]).strip().split(";")[0]

    def sbatch_as(self, user: ClusterUser, *args: str) -> CommandResult:
        """``sbatch --parsable`` as ``user``; the result, refused or not (never retried:
        a retry after a refusal would count twice against a submit limit)."""
        return self.runner.run(user.as_user(["sbatch", "--parsable", *args]),
                               check=False, retry=False)

    def sacct(self, job: str, fields: str = "JobID,State,NodeList") -> list[dict[str, str]]:
        """One row per allocation (``-X``) of ``job`` (array tasks included)."""
        names = fields.split(",")
        out = self.run(["sacct", "-n", "-P", "-X", "-j", job, "-o", fields])
        return [dict(zip(names, line.split("|"), strict=False))
                for line in out.splitlines() if line.strip()]

    def squeue_field(self, job: str, fmt: str) -> str:
        res = self.runner.run(["squeue", "-h", "-j", job, "-o", fmt], check=False)
        return res.stdout.strip()

    def show_job(self, job: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (only while the controller remembers the job)."""
        out = self.run(["scontrol", "-o", "show", "job", job])
        return dict(w.split("=", 1) for w in out.split() if "=" in w)

    def partitions(self) -> dict[str, dict[str, str]]:
        out = self.run(["scontrol", "-o", "show", "partition"])
        parts: dict[str, dict[str, str]] = {}
        for line in out.splitlines():
            kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
            parts[kv["PartitionName"]] = kv
        return parts

    def cancel(self, *jobs: str) -> None:
        self.runner.run(["scancel", *jobs], check=False)

    @staticmethod
    def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 180.0,
                 interval: float = 0.5) -> T:
        """Poll ``fn`` until it returns something truthy; fail with ``what`` on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = fn()
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(interval)


@pytest.fixture(scope="session")
def slurm_cluster(slurm_required: None) -> SlurmCluster:
    """The live dev cluster (`scontrol ping` UP and 4 usable nodes, probed once a session)."""
    return SlurmCluster()


@pytest.fixture(scope="session")
def cluster_user(slurm_cluster: SlurmCluster) -> ClusterUser:
    """The dev cluster's non-root test user (``dethpc-user``, account ``ml-team``, whose
    default QoS is ``limited``), created when missing. Needs root."""
    if os.geteuid() != 0:
        pytest.skip("creating the dev cluster's test user needs root")
    return ensure_user()


@pytest.fixture(scope="session")
def user_python(cluster_user: ClusterUser) -> list[str]:
    """The argv prefix that runs this checkout's Python, with dethpc and its
    dependencies importable, as ``cluster_user``: ``env PYTHONPATH=... <python>``.
    This interpreter when the user may execute it; else (a pyenv under /root, say)
    the system ``python3.X`` of the same minor version, with this environment's
    site-packages on ``PYTHONPATH``."""
    paths = [str(HERE.parents[1]), *dict.fromkeys(
        (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]))]
    prefix = ["env", f"PYTHONPATH={os.pathsep.join(paths)}"]
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, f"/usr/bin/{minor}", f"/usr/local/bin/{minor}"):
        probe = cluster_user.as_user([*prefix, python, "-c", "import dethpc.surfaces.cli.main"])
        if subprocess.run(probe, capture_output=True, timeout=60).returncode == 0:
            return [*prefix, python]
    pytest.fail(f"no {minor} that {cluster_user.name} may run imports dethpc "
                f"({sys.executable} is not executable for that user?)")


@pytest.fixture
def user_tmp(cluster_user: ClusterUser) -> Iterator[Path]:
    """A directory ``cluster_user`` owns (mode 755), removed afterwards (kept with
    ``DETHPC_KEEP_TMP=1``, to read a failed run's files)."""
    path = user_dir(cluster_user)
    yield path
    if os.environ.get("DETHPC_KEEP_TMP") != "1":
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def ds_harness(tmp_path: Path, slurm_cluster: SlurmCluster) -> Iterator[DaemonHarness]:
    """The DeepSpeed tests' daemon home (test_deepspeed_trial_slurm.py,
    test_deepspeed_preemption_slurm.py): one slot per node, so a 2-slot trial's ranks are
    two Slurm tasks on two nodes; its experiments cancelled after the test. Skipped
    where deepspeed is not installed (``scripts/setup.sh --tests`` installs it), except
    under CI=true, where a missing deepspeed fails these tests."""
    if importlib.util.find_spec("deepspeed") is None and os.environ.get("CI") != "true":
        pytest.skip("deepspeed not installed (scripts/setup.sh --tests installs it; in CI "
                    "a missing deepspeed fails these tests)")
    from tests.slurm.fixtures.harness import DaemonHarness

    h = DaemonHarness.create(tmp_path / "dethpc", slots_per_node=1)
    yield h
    h.cancel_all_experiments()
