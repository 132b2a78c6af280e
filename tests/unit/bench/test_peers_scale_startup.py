"""bench/peers_scale/emulator's start-up rule (issue 48): the container starts once per
Slurm job run on a node, CUDA initialises once per process -- the same rule for every
system, so each pays what its process and job structure costs a real GPU user."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.peers_scale.emulator import (
    EmulatorSpec,
    ProcessState,
    TrialEmulator,
    container_key,
    join_container,
    load_curves,
)
from bench.peers_scale.worklog import WorkLog, read_log

SPEC = EmulatorSpec(startup_s=10.0, time_scale=0.001, save_s=0.0, load_s=0.0)


class Clock:
    """A fake wall clock that the fake sleep advances."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def __call__(self) -> float:
        return self.now


def job(job_id: str, node: str = "g1", restart: str = "0") -> dict[str, str]:
    return {"SLURM_JOB_ID": job_id, "SLURMD_NODENAME": node, "SLURM_RESTART_COUNT": restart}


def starter(tmp_path: Path, clock: Clock) -> Callable[[dict[str, str], ProcessState], float]:
    """Start one trial in (job env, process); the start-up seconds it paid."""
    log = WorkLog(tmp_path / "w.jsonl")

    def start(env: dict[str, str], process: ProcessState) -> float:
        before = clock.now
        TrialEmulator("t", load_curves()[0], log, SPEC, sleep=clock.sleep, clock=clock,
                      env=env, process=process).start()
        return clock.now - before

    return start


def test_the_defaults_split_the_ten_seconds_in_half_and_round_trip_through_env() -> None:
    spec = EmulatorSpec()
    assert (spec.startup_s, spec.container_part_s, spec.cuda_s) == (10.0, 5.0, 5.0)
    assert EmulatorSpec(startup_s=4.0).container_s == 2.0
    odd = EmulatorSpec(startup_s=8.0, container_s=6.0, time_scale=0.25)
    assert odd.cuda_s == 2.0
    assert EmulatorSpec.from_env(odd.to_env()) == odd
    assert EmulatorSpec.from_env({"PEERS_STARTUP_S": "6"}).container_s == 3.0


def test_container_key_is_the_job_run_on_its_node() -> None:
    assert container_key({}) is None
    assert container_key(job("12", "g3", "2")) == "12.2.g3"
    assert container_key({"SLURM_JOB_ID": "12", "SLURMD_NODENAME": "g3"}) == "12.0.g3"


def test_one_job_run_pays_the_container_once_each_process_pays_cuda_once(
        tmp_path: Path) -> None:
    clock = Clock()
    start = starter(tmp_path, clock)
    first, second = ProcessState(), ProcessState()
    assert start(job("7"), first) == 10.0          # cold job, cold process
    assert start(job("7"), first) == 0.0           # the same process again: warm
    assert start(job("7"), second) == 5.0          # a new process of the job: CUDA only
    assert start(job("7", restart="1"), ProcessState()) == 10.0   # requeued: a new run
    assert start(job("7", node="g2"), ProcessState()) == 10.0     # another node of it
    assert start(job("8"), ProcessState()) == 10.0                # another job
    ready = [r for r in read_log(tmp_path / "w.jsonl") if r["event"] == "ready"]
    assert [(r["container_s"], r["cuda_s"]) for r in ready] == [
        (5.0, 5.0), (0.0, 0.0), (0.0, 5.0), (5.0, 5.0), (5.0, 5.0), (5.0, 5.0)]
    starts = [r for r in read_log(tmp_path / "w.jsonl") if r["event"] == "start"]
    assert starts[0]["container"] == "7.0.g1" and starts[3]["container"] == "7.1.g1"


def test_a_process_arriving_while_the_container_starts_waits_for_the_rest(
        tmp_path: Path) -> None:
    clock = Clock()
    assert join_container(tmp_path, "9.0.g1", 5.0, lambda s: None, clock) == (5.0, 1005.0)
    clock.now += 2.0                # the first is still inside its 5 s
    waited: list[float] = []
    assert join_container(tmp_path, "9.0.g1", 5.0, waited.append, clock) == (3.0, 1005.0)
    assert waited == [3.0]
    clock.now += 10.0               # long up: nothing to wait for
    assert join_container(tmp_path, "9.0.g1", 5.0, waited.append, clock) == (0.0, 1005.0)
    assert waited == [3.0] and not list(tmp_path.glob(".*.tmp"))


def test_outside_slurm_the_process_is_its_own_container_run(tmp_path: Path) -> None:
    clock = Clock()
    start = starter(tmp_path, clock)
    proc = ProcessState()
    assert (start({}, proc), start({}, proc), start({}, ProcessState())) == (10.0, 0.0, 10.0)
    assert not (tmp_path / "containers").exists()


@pytest.mark.parametrize(("system", "expected"), [
    # one Optuna worker (an array task, one process) runs trial after trial
    ("optuna-worker", [10.0, 0.0, 0.0]),
    # one dethpc pool worker job forks a fresh process for each trial
    ("dethpc-pool", [10.0, 5.0, 5.0]),
    # per-job dethpc, submitit, Hydra: each trial its own job and process
    ("per-job", [10.0, 10.0, 10.0]),
    # Ray Tune on one node without reuse_actors: a new actor process per trial
    ("ray-node", [10.0, 5.0, 5.0]),
])
def test_each_systems_shape_pays_what_the_rule_says(tmp_path: Path, system: str,
                                                    expected: list[float]) -> None:
    clock = Clock()
    start = starter(tmp_path, clock)
    worker = ProcessState()
    paid = []
    for i in range(3):
        if system == "optuna-worker":
            paid.append(start(job("100"), worker))
        elif system in ("dethpc-pool", "ray-node"):
            paid.append(start(job("100"), ProcessState()))
        else:
            paid.append(start(job(str(200 + i)), ProcessState()))
    assert paid == expected


def test_a_forked_child_pays_cuda_again(tmp_path: Path) -> None:
    """CUDA cannot survive fork: a child forked after its parent paid pays again, as a
    pool worker's forked trial does (the parent's state is inherited, its pid is not)."""
    proc = ProcessState()
    proc.cuda_pid = os.getpid()     # the parent paid
    assert not proc.needs_cuda()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        os.write(write_fd, b"1" if proc.needs_cuda() else b"0")
        os._exit(0)
    os.close(write_fd)
    answer = os.read(read_fd, 1)
    os.close(read_fd)
    os.waitpid(pid, 0)
    assert answer == b"1"


def test_cuda_begun_ahead_in_a_spare_costs_the_trial_only_what_is_left(
        tmp_path: Path) -> None:
    """A dethpc pool spare (``preload: [..., bench.peers_scale.emulator:init_cuda]``)
    begins CUDA before its trial arrives: the trial waits for the rest of ``cuda_s``."""
    clock = Clock()
    start = starter(tmp_path, clock)
    # a spare that began before its job's container was up (the worker's first): CUDA
    # counts from the container's ready time, so the first trial still pays 10 s
    first = ProcessState()
    first.begin_cuda(clock.now)
    clock.now += 0.5
    assert start(job("5"), first) == 10.0
    spare = ProcessState()
    spare.begin_cuda(clock.now)
    clock.now += 2.0                                       # the item came 2 s later
    assert start(job("5"), spare) == 3.0
    assert start(job("5"), spare) == 0.0                   # and it stays paid
    early = ProcessState()
    early.begin_cuda(clock.now)
    clock.now += 60.0                                      # long before: nothing left
    assert start(job("5"), early) == 0.0
    inherited = ProcessState(cuda_pid=os.getpid() + 1, cuda_began=clock.now)
    assert inherited.needs_cuda()                          # begun in another process
    assert start(job("5"), inherited) == 5.0
