"""Pool workers end to end on this machine (dethpc.launch.worker), real processes, no mocks.

The test plays the daemon side: it writes trials' hparams/target files, enqueues work
items built by ``dethpc.jobs.worker_pool_items.work_item`` (the job contract's environment),
reads results, and returns expired leases. Proves: promotions continue in the same
live workers (K worker processes for trials + promotions; the promoted trial resumes
from its checkpoint); a preempted worker hands its lease back and the trial resumes
on the other worker; a worker killed with -9 (its node "dies") loses its lease after
the timeout and the trial resumes elsewhere; a retired worker task (the pool shrank)
exits after its current run while the others go on; drained workers exit 0.
Wall time about 17-21 s.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dethpc.common import worker_queue as queue
from dethpc.common.paths import ExperimentPaths
from dethpc.config import parse_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.jobs.worker_pool_items import work_item, worker_pool_problem

TOY = Path(__file__).parents[1] / "fixtures" / "toy" / "train.py"
CLUSTER = ClusterConfig(pools={"default": ResourcePool(
    name="default", partition="debug", default_time="00:10:00", signal="USR2",
    signal_grace_s=60)})
CFG = parse_experiment_config({
    "name": "pool", "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 10}}})


class Pool:
    def __init__(self, run_dir: Path, backend: str = "local") -> None:
        self.run_dir = run_dir
        self.backend = backend
        self.paths = queue.WorkerPoolPaths.of_run_dir(run_dir).create()
        self.exp = ExperimentPaths(run_dir)
        self.exp.context.mkdir(parents=True)
        shutil.copy(TOY, self.exp.context / "train.py")
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.results: list[queue.RunResult] = []

    def start(self, name: str, preload: str = "dethpc.core", task: str = "",
              **extra_env: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), **extra_env}
        env.pop("SLURM_ARRAY_TASK_ID", None)
        self.workers[name] = subprocess.Popen(
            [sys.executable, "-m", "dethpc.launch.worker", "--run-dir", str(self.run_dir),
             "--worker-id", name, "--preload", preload, "--heartbeat-s", "0.3",
             "--task", task],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def submit(self, trial: int, seq: int, length: int, every: int = 0, **hp: float) -> None:
        tp = self.exp.trial(trial)
        tp.root.mkdir(parents=True, exist_ok=True)
        tp.hparams.write_text(json.dumps({"x": 2.0, "step_time": 0.02, **hp}))
        tp.target.write_text(json.dumps({"unit": "batches", "length": length,
                                         "validate_at": list(range(every or length,
                                                                   length + 1,
                                                                   every or length))}))
        queue.enqueue(self.paths, work_item(CFG, CLUSTER, backend=self.backend, python="python3",
                                            run_dir=self.run_dir, exp_id=1, trial_id=trial,
                                            seq=seq))

    def wait_results(self, n: int, timeout_s: float = 60.0,
                     tick: Callable[[], object] | None = None) -> list[queue.RunResult]:
        deadline = time.monotonic() + timeout_s
        while len(self.results) < n:
            assert time.monotonic() < deadline, (self.results, self.diag())
            if tick is not None:
                tick()
            self.results += queue.take_results(self.paths)
            time.sleep(0.05)
        return self.results

    def wait_until(self, cond: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not cond():
            assert time.monotonic() < deadline, f"timed out: {what}; {self.diag()}"
            time.sleep(0.05)

    def holder(self, trial: int) -> str:
        for name in queue.active_leases(self.paths):
            worker, item = name.split(queue.LEASE_SEP, 1)
            if item.startswith(f"t{trial}-"):
                return worker
        return ""

    def steps(self, trial: int) -> int:
        path = self.exp.trial(trial).metrics
        if not path.exists():
            return 0
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        return max((r["steps"] for r in lines if r.get("kind") == "training"), default=0)

    def exits(self, trial: int) -> list[str]:
        path = self.exp.trial(trial).exit_log
        return [json.loads(x)["reason"] for x in path.read_text().splitlines()]

    def log(self, trial: int) -> str:
        return "".join(p.read_text() for p in self.exp.trial(trial).root.glob("slurm-*.out"))

    def diag(self) -> str:
        return (f"work={queue.pending(self.paths)} leases={queue.active_leases(self.paths)} "
                f"workers={ {k: p.poll() for k, p in self.workers.items()} }")

    def drain(self, timeout_s: float = 30.0) -> dict[str, int | None]:
        self.paths.drain.touch()
        for p in self.workers.values():
            try:
                p.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        return {k: p.poll() for k, p in self.workers.items()}


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Pool]:
    p = Pool(tmp_path / "run")
    yield p
    for w in p.workers.values():
        if w.poll() is None:
            w.kill()
            w.wait()


def test_promotions_continue_in_live_workers(pool: Pool) -> None:
    assert worker_pool_problem(CFG, "python3") == ""
    pool.start("w0")
    pool.start("w1")
    for t in range(4):
        pool.submit(t, 1, length=5, x=float(t))
    first = pool.wait_results(4)
    assert {r.reason for r in first} == {"completed"}
    # ASHA promotes trials 2 and 3: a new target and a new item, no new job or worker
    for t in (2, 3):
        pool.submit(t, 2, length=15, x=float(t))
    done = pool.wait_results(6)
    assert {(r.trial_id, r.seq, r.reason) for r in done[4:]} == {(2, 2, "completed"),
                                                                  (3, 2, "completed")}
    for t in (2, 3):
        assert "toy: resumed at step 5" in pool.log(t)
        assert pool.steps(t) == 15
        assert pool.exits(t) == ["completed", "completed"]
    for t in (0, 1):
        assert pool.steps(t) == 5
    assert {r.worker for r in done} <= {"w0", "w1"}
    assert all(p.poll() is None for p in pool.workers.values())   # still alive: 2 processes
    assert all(r.start_s < 1.0 for r in done)
    assert pool.drain() == {"w0": 0, "w1": 0}
    assert queue.pending(pool.paths) == [] and queue.active_leases(pool.paths) == []


def test_a_preload_call_runs_ahead_in_each_trials_own_process(pool: Pool,
                                                             tmp_path: Path) -> None:
    """``--preload dethpc.core,mod:init``: ``init`` runs in a spare forked ahead of each
    trial (CUDA's initialisation, paid while the previous trial runs), never in the
    worker; the trials run as before; the spare left at the end goes with the worker."""
    (tmp_path / "spare_init_mod.py").write_text(
        "import os\n"
        "def init():\n"
        "    with open(os.environ['SPARE_MARK'], 'a') as fh:\n"
        "        fh.write(f'{os.getpid()}\\n')\n")
    mark = tmp_path / "calls.txt"
    pool.start("w0", preload="dethpc.core,spare_init_mod:init", SPARE_MARK=str(mark),
               PYTHONPATH=f"{Path(__file__).parents[2]}{os.pathsep}{tmp_path}")
    for t in range(3):
        pool.submit(t, 1, length=5, x=float(t))
    assert {r.reason for r in pool.wait_results(3)} == {"completed"}
    # one call a trial, each in its own process, and the next spare's after the last
    pool.wait_until(lambda: mark.exists() and len(mark.read_text().split()) == 4,
                    "4 spare calls")
    pids = [int(x) for x in mark.read_text().split()]
    assert len(set(pids)) == 4 and pool.workers["w0"].pid not in pids
    for t in range(3):
        assert pool.steps(t) == 5 and pool.exits(t) == ["completed"]
    assert pool.drain() == {"w0": 0}
    with pytest.raises(ProcessLookupError):      # the last spare was dropped with it
        os.kill(pids[-1], 0)


def test_preempted_worker_hands_back_and_trial_resumes_elsewhere(pool: Pool) -> None:
    pool.start("w0")
    pool.submit(7, 1, length=80, step_time=0.05)
    pool.wait_until(lambda: pool.steps(7) >= 10, "trial 7 trains on w0")
    assert pool.holder(7) == "w0"
    pool.start("w1")
    pool.workers["w0"].send_signal(signal.SIGUSR2)
    assert pool.workers["w0"].wait(timeout=30) == 85        # asks for a requeue
    res = pool.wait_results(1)
    assert (res[0].trial_id, res[0].reason, res[0].worker) == (7, "completed", "w1")
    assert res[0].extra["attempt"] == 1
    assert pool.exits(7) == ["preempted", "completed"]
    assert "toy: resumed at step" in pool.log(7)
    assert pool.steps(7) == 80
    assert pool.drain() == {"w0": 85, "w1": 0}


def test_dead_worker_loses_its_lease_after_the_timeout(pool: Pool) -> None:
    pool.start("w0")
    pool.submit(9, 1, length=80, every=10, step_time=0.05)   # a checkpoint every 10 steps
    pool.wait_until(lambda: pool.steps(9) >= 15, "trial 9 trains on w0")
    w0 = pool.workers["w0"]
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(w0.pid)],
                              capture_output=True, text=True, check=False).stdout.split()
    assert len(children) == 1
    os.kill(w0.pid, signal.SIGKILL)                         # the node dies: worker and trial
    os.kill(int(children[0]), signal.SIGKILL)
    w0.wait()
    pool.start("w1")
    returned: list[queue.WorkItem] = []
    res = pool.wait_results(1, tick=lambda: returned.extend(queue.expire(pool.paths, 2.0)))
    assert [(i.trial_id, i.attempt) for i in returned] == [(9, 1)]
    assert (res[0].trial_id, res[0].reason, res[0].worker) == (9, "completed", "w1")
    assert "toy: resumed at step" in pool.log(9)
    assert pool.steps(9) == 80
    assert pool.drain()["w1"] == 0


def test_shrinking_the_pool_retires_workers_after_their_run(pool: Pool) -> None:
    pool.start("w0", task="0")
    pool.start("w1", task="1")
    pool.submit(1, 1, length=40, step_time=0.05)
    pool.submit(2, 1, length=40, step_time=0.05)
    pool.wait_until(lambda: pool.holder(1) != "" and pool.holder(2) != "", "both run")
    queue.retire(pool.paths, ["1"])
    for t in (3, 4):
        pool.submit(t, 1, length=3)
    assert pool.workers["w1"].wait(timeout=60) == 0          # retired after its trial
    res = pool.wait_results(4)
    assert {r.reason for r in res} == {"completed"}
    after = [r for r in res if r.trial_id in (3, 4)]
    assert {r.worker for r in after} == {"w0"}
    assert [r.worker for r in res if r.worker == "w1"] == ["w1"]   # one run, then out
    assert pool.drain() == {"w0": 0, "w1": 0}


def test_a_bad_item_is_an_error_result_and_the_worker_goes_on(pool: Pool) -> None:
    pool.start("w0")
    bad = work_item(CFG, CLUSTER, backend="local", python="python3", run_dir=pool.run_dir,
                    exp_id=1, trial_id=40, seq=1)                # no trial directory
    queue.enqueue(pool.paths, bad)
    pool.submit(41, 1, length=3)
    res = sorted(pool.wait_results(2), key=lambda r: r.trial_id)
    assert [(r.trial_id, r.reason) for r in res] == [(40, "error"), (41, "completed")]
    assert "missing" in res[0].extra["error"]
    # a trial that leaves a background process behind: it ends with the trial
    script = pool.exp.context / "leaves.py"
    script.write_text("import subprocess, sys\n"
                      "p = subprocess.Popen(['sleep', '300'])\n"
                      "open('sleeper.pid', 'w').write(str(p.pid))\n")
    tp = pool.exp.trial(42)
    tp.root.mkdir(parents=True)
    item = work_item(CFG, CLUSTER, backend="local", python="python3", run_dir=pool.run_dir,
                     exp_id=1, trial_id=42, seq=1)
    queue.enqueue(pool.paths, queue.WorkItem(
        trial_id=42, seq=1, argv=["python3", "leaves.py"], env=item.env, cwd=item.cwd,
        trial_dir=item.trial_dir))
    assert pool.wait_results(3)[2].reason == "completed"
    sleeper = int((pool.exp.context / "sleeper.pid").read_text())
    pool.wait_until(lambda: not Path(f"/proc/{sleeper}").exists()
                    or "Z" in Path(f"/proc/{sleeper}/stat").read_text().split()[2],
                    "the trial's leftover process ends", timeout_s=10)
    assert pool.drain() == {"w0": 0}
