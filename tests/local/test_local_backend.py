"""The local backend for real: detached supervisors running small bash scripts.

No timed assertions: tests wait for states with a generous deadline and compare
event order / interval overlap, never wall durations.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dethpc.backends.base import Backend, JobAction, JobInfo, JobRequest, JobState
from dethpc.backends.local import LocalBackend
from dethpc.backends.local_spool import read_json
from tests import backend_polling as polling

DEADLINE_S = 60.0


def wait_for(backend: Backend, refs: list[str],
             pred: Callable[[dict[str, JobInfo]], bool], what: str) -> dict[str, JobInfo]:
    return polling.wait_for(backend, refs, pred, what, DEADLINE_S, 0.05)


def wait_terminal(backend: LocalBackend, refs: list[str]) -> dict[str, JobInfo]:
    return wait_for(backend, refs, lambda i: all(x.state.is_terminal for x in i.values()),
                    "terminal states")


def wait_file(path: Path) -> None:
    polling.wait_file(path, DEADLINE_S, 0.05)


@pytest.fixture
def spool(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "spool"
    yield root
    # leave no supervisor or job behind, whatever the test did
    for state_file in root.glob("tasks/*/state.json"):
        state = read_json(state_file) or {}
        for key, kill in (("supervisor_pid", os.kill), ("pgid", os.killpg)):
            if state.get(key):
                try:
                    kill(int(state[key]), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


@pytest.fixture
def work(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


def script(work: Path, body: str, name: str = "job.sh", sbatch: tuple[str, ...] = ()) -> Path:
    path = work / name
    header = "".join(f"#SBATCH {option}\n" for option in sbatch)
    path.write_text("#!/bin/bash\n" + header + "set -u\n" + textwrap.dedent(body))
    return path


def request(work: Path, path: Path, **kw: object) -> JobRequest:
    kw.setdefault("name", "dethpc-e1-b1")
    kw.setdefault("comment", "dethpc:exp=1:batch=1")
    return JobRequest(script=path, workdir=work, **kw)  # type: ignore[arg-type]


def intervals(work: Path, prefix: str) -> list[tuple[float, float]]:
    out = []
    for start in sorted(work.glob(f"{prefix}-start-*")):
        end = start.with_name(start.name.replace("-start-", "-end-"))
        out.append((float(start.read_text()), float(end.read_text())))
    return out


def max_overlap(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    cur = best = 0
    for _, delta in events:  # ends sort before starts at equal times
        cur += delta
        best = max(best, cur)
    return best


TIMED = """
date +%s.%N > "{p}-start-$SLURM_ARRAY_TASK_ID"
sleep 0.5
date +%s.%N > "{p}-end-$SLURM_ARRAY_TASK_ID"
"""


def test_is_a_backend(spool: Path) -> None:
    backend = LocalBackend(spool)
    assert isinstance(backend, Backend)
    assert backend.available() and backend.max_array_size() > 1000
    backend.check_pool("anything", None, 4, 8, 8)  # no-op


def test_env_and_exit_codes(spool: Path, work: Path) -> None:
    backend = LocalBackend(spool)
    path = script(work, """
        env | grep -E '^(SLURM|DETHPC|MY)_' | sort > "env-$SLURM_ARRAY_TASK_ID"
        pwd > "cwd-$SLURM_ARRAY_TASK_ID"
        exit $((SLURM_ARRAY_TASK_ID * 3))
    """)
    refs = backend.submit(request(work, path, array_indices=(0, 1, 5), env={"MY_VAR": "a b"}))
    job = refs[0].split("_")[0]
    assert refs == [f"{job}_0", f"{job}_1", f"{job}_5"]
    infos = wait_terminal(backend, refs)
    assert [infos[r].state for r in refs] == [JobState.COMPLETED, JobState.FAILED,
                                              JobState.FAILED]
    assert [infos[r].exit_code for r in refs] == [0, 3, 15]
    assert infos[refs[0]].name == "dethpc-e1-b1"
    assert infos[refs[0]].comment == "dethpc:exp=1:batch=1"
    envs = []
    for idx in (0, 1, 5):
        env = dict(line.split("=", 1) for line in (work / f"env-{idx}").read_text().splitlines())
        envs.append(env)
        assert env["SLURM_ARRAY_JOB_ID"] == job
        assert env["SLURM_ARRAY_TASK_ID"] == str(idx)
        assert env["SLURM_JOB_NAME"] == "dethpc-e1-b1"
        assert env["SLURM_RESTART_COUNT"] == "0"
        assert env["SLURM_PROCID"] == env["SLURM_NODEID"] == env["SLURM_LOCALID"] == "0"
        assert env["SLURM_NTASKS"] == env["SLURM_NNODES"] == "1"
        assert env["SLURM_JOB_NODELIST"] == env["SLURM_NODELIST"] == "localhost"
        assert env["SLURM_SUBMIT_DIR"] == str(work.resolve())
        assert int(env["SLURM_CPUS_ON_NODE"]) >= 1
        assert env["DETHPC_BACKEND"] == "local"
        assert env["MY_VAR"] == "a b"
        assert (work / f"cwd-{idx}").read_text().strip() == str(work.resolve())
    assert len({e["SLURM_JOB_ID"] for e in envs}) == 3  # each task its own job id


def test_single_job_ref_and_unknown(spool: Path, work: Path) -> None:
    backend = LocalBackend(spool)
    path = script(work, 'echo "${SLURM_ARRAY_TASK_ID:-none}" > out\n')
    refs = backend.submit(request(work, path))
    assert len(refs) == 1 and "_" not in refs[0]
    assert wait_terminal(backend, refs)[refs[0]].state is JobState.COMPLETED
    assert (work / "out").read_text().strip() == "none"
    assert backend.poll(["999999", "../x"])["999999"].state is JobState.UNKNOWN


def test_concurrency_limit(spool: Path, work: Path) -> None:
    backend = LocalBackend(spool, max_concurrent=2)
    path = script(work, TIMED.format(p="c"))
    refs = backend.submit(request(work, path, array_indices=(0, 1, 2, 3)))
    infos = wait_terminal(backend, refs)
    assert all(i.state is JobState.COMPLETED for i in infos.values())
    spans = intervals(work, "c")
    assert len(spans) == 4
    assert max_overlap(spans) <= 2


def test_a_job_takes_one_slot_per_task(spool: Path, work: Path) -> None:
    """``#SBATCH --ntasks=2`` holds 2 of the 2 slots, so a 1-task job waits for it
    ("Resources") instead of running beside it; the job sees its task count."""
    backend = LocalBackend(spool, max_concurrent=2)
    two = script(work, """
        echo "$SLURM_NTASKS $SLURM_TASKS_PER_NODE" > two-env
        date +%s.%N > two-start
        while [ ! -e release ]; do sleep 0.05; done
        date +%s.%N > two-end
    """, "two.sh", sbatch=("--ntasks=2",))
    (ref_two,) = backend.submit(request(work, two))
    wait_file(work / "two-start")
    one = script(work, "date +%s.%N > one-start\n", "one.sh")
    (ref_one,) = backend.submit(request(work, one, name="dethpc-e1-b2"))
    infos = wait_for(backend, [ref_one], lambda i: i[ref_one].reason != ""
                     or i[ref_one].state is not JobState.PENDING, "the 1-task job's verdict")
    assert infos[ref_one].state is JobState.PENDING, "it ran beside a job holding every slot"
    assert infos[ref_one].reason == "Resources"
    (work / "release").touch()
    infos = wait_terminal(backend, [ref_two, ref_one])
    assert all(i.state is JobState.COMPLETED for i in infos.values())
    assert float((work / "one-start").read_text()) >= float((work / "two-end").read_text())
    assert (work / "two-env").read_text().split() == ["2", "2"]


def test_a_job_with_more_tasks_than_slots_takes_them_all(spool: Path, work: Path) -> None:
    backend = LocalBackend(spool, max_concurrent=2)
    path = script(work, 'echo "$SLURM_NTASKS" > n\n')
    (ref,) = backend.submit(request(work, path, extra_args=("--nodes=2", "-n 5")))
    assert wait_terminal(backend, [ref])[ref].state is JobState.COMPLETED
    assert (work / "n").read_text().strip() == "5"


def test_throttle(spool: Path, work: Path) -> None:
    backend = LocalBackend(spool, max_concurrent=8)
    path = script(work, TIMED.format(p="t"))
    refs = backend.submit(request(work, path, array_indices=(0, 1, 2, 3), throttle=1))
    wait_terminal(backend, refs)
    spans = intervals(work, "t")
    assert len(spans) == 4 and max_overlap(spans) == 1


def test_set_throttle_is_honoured_live(spool: Path, work: Path) -> None:
    backend = LocalBackend(spool, max_concurrent=8)
    path = script(work, "while [ ! -e release ]; do sleep 0.05; done\n")
    refs = backend.submit(request(work, path, array_indices=(0, 1, 2), throttle=1))
    running = lambda i: sum(x.state is JobState.RUNNING for x in i.values())  # noqa: E731
    # the others wait, saying why as Slurm does: the second for the throttle, the third
    # behind it (array tasks start in index order)
    why = ["JobArrayTaskLimit", "Priority"]
    infos = wait_for(backend, refs, lambda i: running(i) == 1
                     and [i[r].reason for r in refs[1:]] == why, "waits with reasons")
    assert infos[refs[0]].state is JobState.RUNNING
    assert sum(x.state is JobState.PENDING for x in infos.values()) == 2
    backend.set_throttle(refs[0].split("_")[0], 3)
    wait_for(backend, refs, lambda i: running(i) == 3, "three running tasks")
    (work / "release").touch()
    assert all(i.state is JobState.COMPLETED for i in wait_terminal(backend, refs).values())


def test_requeue_exit_code_reruns(spool: Path, work: Path) -> None:
    backend = LocalBackend(spool)
    path = script(work, """
        echo "$SLURM_RESTART_COUNT" >> runs
        if [ "$SLURM_RESTART_COUNT" = 0 ]; then exit 85; fi
    """)
    refs = backend.submit(request(work, path))
    info = wait_terminal(backend, refs)[refs[0]]
    assert info.state is JobState.COMPLETED and info.restart_count == 1
    assert (work / "runs").read_text().split() == ["0", "1"]


def test_output_goes_where_the_request_asks_across_requeues(spool: Path, work: Path) -> None:
    """``JobRequest.output`` (sbatch's ``--output``): the job's stdout and stderr go
    there, appended across a requeue, and not to the spool's own ``output.log``."""
    backend = LocalBackend(spool)
    path = script(work, """
        echo "out $SLURM_RESTART_COUNT"; echo "err $SLURM_RESTART_COUNT" >&2
        if [ "$SLURM_RESTART_COUNT" = 0 ]; then exit 85; fi
    """)
    log = work / "task" / "job.log"
    log.parent.mkdir()
    refs = backend.submit(request(work, path, output=log))
    assert wait_terminal(backend, refs)[refs[0]].state is JobState.COMPLETED
    assert log.read_text().split("\n") == ["out 0", "err 0", "out 1", "err 1", ""]
    assert not (spool / "tasks" / refs[0] / "output.log").exists()


def test_time_limit_signal_then_term(spool: Path, work: Path) -> None:
    backend = LocalBackend(spool)
    path = script(work, """
        trap 'date +%s.%N > got-usr2' USR2
        trap 'date +%s.%N > got-term; exit 143' TERM
        while true; do sleep 0.05; done
    """)
    refs = backend.submit(request(work, path, time_limit_s=2, signal="USR2", signal_lead_s=1))
    info = wait_terminal(backend, refs)[refs[0]]
    assert info.state is JobState.TIMEOUT
    assert float((work / "got-usr2").read_text()) < float((work / "got-term").read_text())


def test_cancel_pending_and_running(spool: Path, work: Path) -> None:
    backend = LocalBackend(spool, max_concurrent=1)
    path = script(work, """
        touch "started-$SLURM_ARRAY_TASK_ID"
        while true; do sleep 0.05; done
    """)
    refs = backend.submit(request(work, path, array_indices=(0, 1)))
    wait_file(work / "started-0")
    # the script's first line can run before its supervisor records it running (seen
    # once in a fresh clone's run on 2 loaded cores): wait for the record, not the file
    infos = wait_for(backend, refs, lambda i: i[refs[0]].state is JobState.RUNNING,
                     "task 0 recorded running")
    assert infos[refs[1]].state is JobState.PENDING
    backend.cancel(refs)
    infos = wait_terminal(backend, refs)
    assert all(i.state is JobState.CANCELLED for i in infos.values())
    assert not (work / "started-1").exists()
    backend.cancel(refs)  # cancelling finished tasks is not an error, and changes nothing
    assert all(i.state is JobState.CANCELLED for i in backend.poll(refs).values())
    assert not (work / "started-1").exists()


def test_cancel_with_signal_goes_to_the_job(spool: Path, work: Path) -> None:
    backend = LocalBackend(spool)
    path = script(work, """
        trap 'touch got-usr1; exit 0' USR1
        touch started
        while true; do sleep 0.05; done
    """)
    refs = backend.submit(request(work, path))
    wait_file(work / "started")
    backend.cancel(refs, signal="USR1")
    assert wait_terminal(backend, refs)[refs[0]].state is JobState.COMPLETED
    assert (work / "got-usr1").exists()


def test_requeue_running_and_finished(spool: Path, work: Path) -> None:
    backend = LocalBackend(spool)
    path = script(work, """
        echo "$SLURM_RESTART_COUNT" >> runs
        touch "started-$SLURM_RESTART_COUNT"
        while [ ! -e release ]; do sleep 0.05; done
    """)
    refs = backend.submit(request(work, path))
    wait_file(work / "started-0")
    backend.act(refs, JobAction.REQUEUE)
    wait_file(work / "started-1")
    (work / "release").touch()
    info = wait_terminal(backend, refs)[refs[0]]
    assert info.state is JobState.COMPLETED and info.restart_count == 1
    backend.act(refs, JobAction.REQUEUE)  # like `scontrol requeue` of a finished job: runs again
    info = wait_for(backend, refs, lambda i: i[refs[0]].restart_count == 2
                    and i[refs[0]].state is JobState.COMPLETED, "second rerun")[refs[0]]
    assert (work / "runs").read_text().split() == ["0", "1", "2"]


DAEMON = """
import sys
from pathlib import Path
from dethpc.backends.base import JobRequest
from dethpc.backends.local import LocalBackend
b = LocalBackend(Path(sys.argv[1]), max_concurrent=2)
refs = b.submit(JobRequest(name="adopt-me", comment="c", script=Path(sys.argv[2]),
                           workdir=Path(sys.argv[3]), array_indices=(0, 1, 2)))
print(",".join(refs), flush=True)
sys.stdin.read()  # wait to be SIGKILLed
"""


def test_daemon_killed_then_new_backend_adopts(spool: Path, work: Path) -> None:
    path = script(work, """
        echo "$SLURM_ARRAY_TASK_ID" >> "runs-$SLURM_ARRAY_TASK_ID"
        while [ ! -e release ]; do sleep 0.05; done
    """)
    daemon = subprocess.Popen([sys.executable, "-c", DAEMON, str(spool), str(path), str(work)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    assert daemon.stdout is not None
    refs = daemon.stdout.readline().strip().split(",")
    assert len(refs) == 3
    daemon.kill()
    daemon.wait()
    backend = LocalBackend(spool, max_concurrent=2)  # the restarted daemon
    running = lambda i: sum(x.state is JobState.RUNNING for x in i.values())  # noqa: E731
    wait_for(backend, refs, lambda i: running(i) == 2, "two running tasks after restart")
    found = backend.find(["adopt-me", "other"])
    assert [f.ref for f in found] == refs
    (work / "release").touch()
    infos = wait_terminal(backend, refs)
    assert all(i.state is JobState.COMPLETED for i in infos.values())
    for idx in range(3):  # each task ran exactly once
        assert (work / f"runs-{idx}").read_text().split() == [str(idx)]


def test_killed_supervisor_is_node_fail(spool: Path, work: Path) -> None:
    backend = LocalBackend(spool)
    path = script(work, "touch started\nwhile true; do sleep 0.05; done\n")
    refs = backend.submit(request(work, path))
    wait_file(work / "started")
    state_file = spool / "tasks" / refs[0] / "state.json"
    wait_for(backend, refs, lambda i: i[refs[0]].state is JobState.RUNNING, "running")
    state = json.loads(state_file.read_text())
    os.kill(state["supervisor_pid"], signal.SIGKILL)
    info = wait_for(backend, refs, lambda i: i[refs[0]].state is JobState.NODE_FAIL,
                    "node_fail")[refs[0]]
    assert info.reason == "supervisor lost"
    end = time.monotonic() + DEADLINE_S
    while _alive(state["pid"]):  # the orphaned job was killed too
        assert time.monotonic() < end, "orphaned job still alive"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False
