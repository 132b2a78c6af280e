"""SlurmBackend against the real dev cluster (tests/slurm/conftest.py: ``slurm_cluster``).

Every wait polls the backend with a generous deadline; nothing asserts on durations.
"""

from __future__ import annotations

import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dethpc.backends.base import Backend, JobAction, JobInfo, JobRequest, JobState
from dethpc.backends.slurm import SlurmBackend
from dethpc.common.errors import CommandError, SubmitError
from dethpc.common.runner import CommandRunner, RecordingRunner
from tests import backend_polling as polling

#: the version-spanning tier: also runs on the Slurm 25.11 dev cluster (docs/testing.md)
pytestmark = pytest.mark.spanning

DEADLINE_S = 240.0


@pytest.fixture
def backend(slurm_cluster: Any) -> Iterator[SlurmBackend]:
    b = SlurmBackend(RecordingRunner(timeout=30.0), user=None)
    submitted: list[str] = []
    original = b.submit

    def tracking_submit(request: JobRequest) -> list[str]:
        refs = original(request)
        submitted.extend(refs)
        return refs

    b.submit = tracking_submit  # type: ignore[method-assign]
    yield b
    if submitted:  # leave nothing running on the shared dev cluster
        CommandRunner().run(["scancel", *{r.split("_")[0] for r in submitted}], check=False)


def unique_name() -> str:
    return f"dethpc-test-{uuid.uuid4().hex[:8]}"


def make_request(tmp_path: Path, body: str, **kw: Any) -> JobRequest:
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --partition=debug\n"
                      f"#SBATCH --output={tmp_path}/slurm-%A_%a.out\n" + textwrap.dedent(body))
    kw.setdefault("name", unique_name())
    kw.setdefault("comment", "dethpc:exp=0:batch=0")
    return JobRequest(script=script, workdir=tmp_path, **kw)


def wait_for(backend: Backend, refs: list[str],
             pred: Callable[[dict[str, JobInfo]], bool], what: str) -> dict[str, JobInfo]:
    return polling.wait_for(backend, refs, pred, what, DEADLINE_S, 0.5)


def terminal(infos: dict[str, JobInfo]) -> bool:
    return all(i.state.is_terminal and i.state is not JobState.UNKNOWN for i in infos.values())


def count(infos: dict[str, JobInfo], state: JobState) -> int:
    return sum(i.state is state for i in infos.values())


def wait_file(path: Path) -> None:
    polling.wait_file(path, DEADLINE_S, 0.2)


def test_discovery(backend: SlurmBackend) -> None:
    assert isinstance(backend, Backend)
    assert backend.available()
    assert backend.max_array_size() == 1001   # the dev cluster keeps Slurm's default
    assert {"debug", "low", "high"} <= set(backend.partitions())


def test_array_exit_codes(backend: SlurmBackend, tmp_path: Path) -> None:
    body = 'echo "$SLURM_ARRAY_TASK_ID $SLURM_JOB_NAME" > "out-$SLURM_ARRAY_TASK_ID"\n'
    req = make_request(tmp_path, body + "exit $SLURM_ARRAY_TASK_ID\n", array_indices=(0, 2, 3))
    refs = backend.submit(req)
    job = refs[0].split("_")[0]
    assert refs == [f"{job}_0", f"{job}_2", f"{job}_3"]
    infos = wait_for(backend, refs, terminal, "array to finish")
    assert infos[refs[0]].state is JobState.COMPLETED and infos[refs[0]].exit_code == 0
    assert (infos[refs[1]].state, infos[refs[1]].exit_code) == (JobState.FAILED, 2)
    assert (infos[refs[2]].state, infos[refs[2]].exit_code) == (JobState.FAILED, 3)
    assert (tmp_path / "out-2").read_text().split() == ["2", req.name]  # --chdir honoured


def test_cancel_pending_and_running_in_one_call(backend: SlurmBackend, tmp_path: Path) -> None:
    req = make_request(tmp_path, 'touch "started-$SLURM_ARRAY_TASK_ID"\nsleep 300\n',
                       array_indices=(0, 1, 2), throttle=1)
    refs = backend.submit(req)
    infos = wait_for(backend, refs, lambda i: count(i, JobState.RUNNING) == 1, "one running")
    assert count(infos, JobState.PENDING) == 2
    runner = backend.runner
    assert isinstance(runner, RecordingRunner)
    before = runner.count("scancel")
    backend.cancel(refs)
    assert runner.count("scancel") == before + 1
    infos = wait_for(backend, refs, terminal, "cancelled tasks")
    assert all(i.state is JobState.CANCELLED for i in infos.values()), infos
    assert not (tmp_path / "started-1").exists() and not (tmp_path / "started-2").exists()
    backend.cancel(refs)  # cancelling finished jobs is not an error


def test_cancel_with_signal_reaches_batch_shell(slurm_cluster: Any, tmp_path: Path) -> None:
    backend = SlurmBackend(CommandRunner())     # the default: the batch shell, as B:
    req = make_request(tmp_path, "trap 'touch got-usr2; exit 0' USR2\ntouch started\n"
                       "for i in $(seq 3000); do sleep 0.1; done\nexit 1\n")
    refs = backend.submit(req)
    try:
        wait_file(tmp_path / "started")
        backend.cancel(refs, signal="USR2")
        infos = wait_for(backend, refs, terminal, "signalled job to finish")
        assert infos[refs[0]].state is JobState.COMPLETED
        assert (tmp_path / "got-usr2").exists()
    finally:
        backend.cancel(refs)


def test_requeue(backend: SlurmBackend, tmp_path: Path) -> None:
    req = make_request(tmp_path, """
        # Slurm sets SLURM_RESTART_COUNT only once a job has been requeued
        echo "${SLURM_RESTART_COUNT:-0}" >> runs
        touch "started-${SLURM_RESTART_COUNT:-0}"
        while [ ! -e release ]; do sleep 0.2; done
    """)
    refs = backend.submit(req)
    wait_file(tmp_path / "started-0")
    wait_for(backend, refs, lambda i: count(i, JobState.RUNNING) == 1, "running")
    backend.act(refs, JobAction.REQUEUE)
    wait_file(tmp_path / "started-1")  # Slurm starts it again (after cred_expire)
    (tmp_path / "release").touch()
    infos = wait_for(backend, refs, terminal, "requeued job to finish")
    assert infos[refs[0]].state is JobState.COMPLETED
    assert (tmp_path / "runs").read_text().split() == ["0", "1"]


def test_set_throttle(backend: SlurmBackend, tmp_path: Path) -> None:
    req = make_request(tmp_path, "while [ ! -e release ]; do sleep 0.2; done\n",
                       array_indices=(0, 1, 2), throttle=1)
    refs = backend.submit(req)
    wait_for(backend, refs, lambda i: count(i, JobState.RUNNING) == 1, "one running")
    backend.set_throttle(refs[0].split("_")[0], 3)
    wait_for(backend, refs, lambda i: count(i, JobState.RUNNING) == 3, "three running")
    (tmp_path / "release").touch()
    infos = wait_for(backend, refs, terminal, "array to finish")
    assert all(i.state is JobState.COMPLETED for i in infos.values())


def find_when_it_can_tell(backend: SlurmBackend, names: list[str],
                          timeout: float = 120.0) -> list[JobInfo]:
    """``backend.find`` as the daemon calls it: a "cannot tell yet" (slurmctld still owes
    slurmdbd accounting records, e.g. after another test's slurmdbd outage; a name that
    was never submitted is missing from sacct) is asked again, as the next tick would."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return backend.find(names)
        except CommandError as exc:
            if exc.reason != "cannot tell yet" or time.monotonic() > deadline:
                raise
        time.sleep(1.0)


def test_find_by_name_after_forgetting_refs(backend: SlurmBackend, tmp_path: Path) -> None:
    req = make_request(tmp_path, "while [ ! -e release ]; do sleep 0.2; done\n",
                       array_indices=(0, 1))
    refs = backend.submit(req)
    found = find_when_it_can_tell(backend, [req.name, unique_name()])
    assert sorted(f.ref for f in found) == sorted(refs)
    assert all(f.name == req.name for f in found)
    (tmp_path / "release").touch()
    wait_for(backend, refs, terminal, "array to finish")
    found = find_when_it_can_tell(backend, [req.name])  # finished: squeue (MinJobAge) or sacct
    assert sorted(f.ref for f in found) == sorted(refs)
    assert all(f.state is JobState.COMPLETED for f in found)


def test_check_pool(backend: SlurmBackend) -> None:
    backend.check_pool("debug", None, nodes=4, tasks_per_node=16, gpus_per_node=0)
    backend.check_pool(None, None, nodes=1, tasks_per_node=1, gpus_per_node=0)
    with pytest.raises(SubmitError, match="existing partitions: debug, high, low"):
        backend.check_pool("nosuch", None, nodes=1, tasks_per_node=1, gpus_per_node=0)
    with pytest.raises(SubmitError, match="cannot fit"):
        backend.check_pool("debug", None, nodes=5, tasks_per_node=1, gpus_per_node=0)
    with pytest.raises(SubmitError, match="cannot fit"):
        backend.check_pool("debug", None, nodes=1, tasks_per_node=17, gpus_per_node=0)
    # the dev cluster's fake GPUs: gpu:a100:2 on n1 and n2 only
    backend.check_pool("debug", None, nodes=2, tasks_per_node=1, gpus_per_node=2)
    with pytest.raises(SubmitError, match="cannot fit"):
        backend.check_pool("debug", None, nodes=1, tasks_per_node=1, gpus_per_node=3)
    with pytest.raises(SubmitError, match="cannot fit"):
        backend.check_pool("debug", None, nodes=3, tasks_per_node=1, gpus_per_node=1)
    backend.check_pool("debug", "normal", nodes=1, tasks_per_node=1, gpus_per_node=0)
    with pytest.raises(SubmitError, match="QoS 'nosuch'"):
        backend.check_pool("debug", "nosuch", nodes=1, tasks_per_node=1, gpus_per_node=0)


def test_bogus_partition_in_script_is_a_submit_error(backend: SlurmBackend,
                                                     tmp_path: Path) -> None:
    req = make_request(tmp_path, "true\n", extra_args=("--partition=nosuch",))
    with pytest.raises(SubmitError, match="nosuch|partition"):
        backend.submit(req)


@pytest.mark.parametrize("n", [5, 50])
def test_poll_is_at_most_two_commands(slurm_cluster: Any, tmp_path: Path, n: int) -> None:
    runner = RecordingRunner(timeout=30.0)
    backend = SlurmBackend(runner)
    req = make_request(tmp_path, "sleep $((SLURM_ARRAY_TASK_ID % 2 * 300))\n",
                       array_indices=tuple(range(n)))
    refs = backend.submit(req)
    try:
        # mixed: half finish at once, half keep running or pending
        infos = wait_for(backend, refs, lambda i: count(i, JobState.COMPLETED) == n // 2 + n % 2,
                         "even tasks to complete")
        assert len(infos) == n
        runner.calls.clear()
        infos = backend.poll(refs)
        assert runner.count() <= 2, runner.calls
        # the live jobs come from one squeue, or from pyslurm where it matches Slurm
        # (the 25.11 cluster: tests/slurm/test_pyslurm_slurm.py)
        assert runner.count("squeue") == (0 if backend._poll._query() else 1)
        assert all(i.state is not JobState.UNKNOWN for i in infos.values())
    finally:
        backend.cancel(refs)


def test_limits_are_read_again_after_a_slurmdbd_outage(slurm_cluster: Any,
                                                        cluster_user: Any) -> None:
    """A daemon that started while slurmdbd was away counts no limits; once slurmdbd is
    back it reads them (``limits_retry_s`` after the failed read), not never again."""
    from dethpc.backends.base import UNLIMITED
    from dethpc.devcluster.faults import ClusterFaults

    backend = SlurmBackend(CommandRunner(timeout=30.0, retries=0), user=cluster_user.name)
    assert backend.accounting_enabled()       # known before the outage (cached)
    with ClusterFaults().slurmdbd_down():
        assert backend.job_limits("debug", None, None) == UNLIMITED
    assert backend.job_limits("debug", None, None) == UNLIMITED   # not retried at once
    backend.limits_retry_s = 0.0                # "a minute later"
    limits = backend.job_limits("debug", None, None)
    assert limits.qos == "limited" and limits.max_submit == 2, limits
