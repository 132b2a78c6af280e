"""pyslurm for real (issue 34 item 3): on the Slurm 25.11 dev cluster, with pyslurm
25.11 built against that cluster's headers (``python -m dethpc.devcluster pyslurm``,
installed by scripts/test.sh), the backend's live-job query goes through pyslurm, and
it answers what the CLI's ``squeue`` answers for the same jobs: an array whose throttle
keeps tasks pending beside running ones, and a job that ended but slurmctld still holds.

Runs only in the 25.11 lane (the ``slurm-25.11`` id; without that cluster it is skipped
with the command that runs it). The spanning tests in that lane poll through pyslurm
too, since the versions match.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from dethpc.backends.base import JobState
from dethpc.backends.slurm import SlurmBackend
from dethpc.common.runner import CommandRunner, RecordingRunner
from tests.slurm.test_slurm_backend import make_request, wait_for

pytestmark = pytest.mark.parametrize("slurm_release", ["25.11"], indirect=True,
                                     ids=["slurm-25.11"])


def test_live_jobs_through_pyslurm_match_squeue(slurm_cluster: Any, slurm_release: str,
                                                tmp_path: Path) -> None:
    if importlib.util.find_spec("pyslurm") is None:
        pytest.fail("pyslurm is not installed: scripts/test.sh installs the wheel of "
                    "`python -m dethpc.devcluster pyslurm` with the 25.11 cluster")
    via_pyslurm = SlurmBackend(RecordingRunner(timeout=30.0))
    via_cli = SlurmBackend(RecordingRunner(timeout=30.0))
    via_cli._poll._query_chosen = True  # the CLI's answer to compare with
    (tmp_path / "one").mkdir()
    (tmp_path / "array").mkdir()
    refs = via_pyslurm.submit(make_request(tmp_path / "one", "true\n"))
    refs += via_pyslurm.submit(make_request(tmp_path / "array", "sleep 600\n",
                                            array_indices=tuple(range(6)), throttle=2))
    try:
        wait_for(via_cli, refs, lambda i: i[refs[0]].state is JobState.COMPLETED
                 and sum(x.state is JobState.RUNNING for x in i.values()) == 2,
                 "the single job done and two array tasks running")
        assert via_pyslurm._poll._query() is not None, "the backend did not choose pyslurm"
        # both answers from the same moment: nothing changes while the array is throttled
        a = via_pyslurm.poll(refs)
        b = via_cli.poll(refs)
        assert a == b
        states = sorted(i.state.name for i in a.values())
        assert states == ["COMPLETED"] + ["PENDING"] * 4 + ["RUNNING"] * 2, states
        assert not any(c[0].endswith("squeue") for c in via_pyslurm.runner.calls), \
            "the pyslurm backend still ran squeue"
    finally:
        CommandRunner().run(["scancel", refs[1].split("_")[0]], check=False)
