"""The daemon's side of the worker pool as pure logic: the plan for an experiment's
workers, an item's state as a job, cancel of items, and the ``workers`` setting."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dethpc.backends.base import JobState
from dethpc.common import worker_queue as queue
from dethpc.common.errors import ConfigError, SubmitError
from dethpc.common.exitcodes import ExitReason
from dethpc.common.kinds import ExperimentKind
from dethpc.config import parse_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool, WorkerPool
from dethpc.control import worker_pool_view as view
from dethpc.control.daemon.budget import SubmitBudget
from dethpc.control.daemon.shared import Scope
from dethpc.control.worker_pool_tend import (
    WorkerPoolMode,
    WorkerPoolTender,
    check_worker_pool,
    worker_pool_mode,
)
from tests.unit.control.daemon_kit import world

P, R, D = JobState.PENDING, JobState.RUNNING, JobState.COMPLETED


def ws(*states: JobState) -> list[view.Worker]:
    return [view.Worker(f"7_{i}", st) for i, st in enumerate(states)]


ALL = ("7_0", "7_1", "7_2", "7_3")   # every worker holds a lease

PLANS = [
    # (want, workers, waiting, live items, active, retired, busy) -> plan
    ("first items: a worker per item up to the pool's size",
     (4, ws(), 3, 3, True, (), ()), view.WorkerPlan(submit=3, undrain=True)),
    ("more items than the pool", (2, ws(), 5, 5, True, (), ()),
     view.WorkerPlan(submit=2, undrain=True)),
    ("enough workers (pending ones count)", (2, ws(R, P), 3, 5, True, (), ("7_0",)),
     view.WorkerPlan(undrain=True)),
    ("a worker ended: replace it while items wait", (2, ws(R, D), 1, 2, True, (), ("7_0",)),
     view.WorkerPlan(submit=1, undrain=True)),
    ("nothing waits: no new worker", (2, ws(R, D), 0, 1, True, (), ("7_0",)),
     view.WorkerPlan()),
    ("fewer items than workers: cancel the one not started, retire the idle running one",
     (4, ws(R, R, P), 0, 1, True, (), ("7_0",)),
     view.WorkerPlan(cancel=("7_2",), retire=("7_1",))),
    ("ASHA stopped most trials: the idle workers beyond the live runs leave, newest first",
     (64, ws(R, R, R, R), 0, 2, True, (), ("7_1",)),
     view.WorkerPlan(retire=("7_3", "7_2"))),
    ("a run ended, not judged yet: it is live, its idle worker stays for its follow-up",
     (64, ws(R, R), 0, 2, True, (), ("7_0",)), view.WorkerPlan()),
    ("a busy worker is never retired for idleness, even beyond the live items",
     (4, ws(R, R), 0, 1, True, (), ("7_0", "7_1")), view.WorkerPlan()),
    ("an idle worker will take the waiting item: no new worker for it",
     (4, ws(R, R), 1, 2, True, (), ("7_0",)), view.WorkerPlan(undrain=True)),
    ("a worker not started will take one waiting item: submit for the other only",
     (4, ws(R, P), 2, 3, True, (), ("7_0",)), view.WorkerPlan(submit=1, undrain=True)),
    ("live runs that ended unjudged get no new worker: only the waiting item does",
     (8, ws(), 1, 3, True, (), ()), view.WorkerPlan(submit=1, undrain=True)),
    ("set-concurrency below the running workers: retire the newest",
     (1, ws(R, R, R), 2, 5, True, (), ALL),
     view.WorkerPlan(retire=("7_2", "7_1"), undrain=True)),
    ("retired workers are not counted; grown back: keep one instead of submitting",
     (2, ws(R, R, R), 1, 4, True, ("7_1", "7_2"), ALL),
     view.WorkerPlan(keep=("7_1",), undrain=True)),
    ("experiment over: drain and cancel what has not started",
     (2, ws(R, P, D), 0, 0, False, (), ()), view.WorkerPlan(drain=True, cancel=("7_1",))),
    ("paused with runs still stopping: no drain yet",
     (2, ws(R, R), 0, 2, False, (), ALL), view.WorkerPlan()),
]


@pytest.mark.parametrize("name,args,plan", PLANS, ids=[p[0] for p in PLANS])
def test_plan_workers(name, args, plan) -> None:
    want, workers, waiting, live, active, retired, busy = args
    assert view.plan_workers(want, workers, waiting=waiting, live_items=live, active=active,
                             retired=retired, busy=busy) == plan


def test_busy_workers_are_the_lease_holders_job_refs(tmp_path: Path) -> None:
    paths = queue.WorkerPoolPaths(tmp_path / "pool").create()
    for t in (1, 2, 3):
        queue.enqueue(paths, _item(t, 0))
    held = [queue.claim(paths, queue.worker_id(ref, 40, "n1")) for ref in ("7_0", "7_3")]
    assert all(held)
    assert queue.claim(paths, queue.worker_id("0", 41, "n1")) is not None  # not a job
    assert view.busy_workers(paths) == {"7_0", "7_3"}


def _item(trial: int, seq: int, attempt: int = 0) -> queue.WorkItem:
    return queue.WorkItem(trial_id=trial, seq=seq, argv=["true"], env={}, cwd="/",
                          trial_dir="/", attempt=attempt,
                          ref=view.item_ref(5, queue.item_name(trial, seq)))


def test_items_read_as_jobs_and_cancel_withdraws_or_kills(tmp_path: Path) -> None:
    paths = queue.WorkerPoolPaths(tmp_path / "pool").create()
    for t in (1, 2, 3, 4):
        queue.enqueue(paths, _item(t, 0))
    held = queue.claim(paths, "w0")            # trial 1
    assert held is not None and held.item.trial_id == 1
    queue.finish(paths, queue.claim(paths, "w1"),  # type: ignore[arg-type]
                 queue.RunResult(trial_id=2, seq=0, reason="stopped", code=81,
                                 worker="w1", start_s=0, wall_s=1,
                                 extra={"attempt": 0, "node": "n3"}))
    back = queue.claim(paths, "w2")            # trial 3, preempted: handed back
    assert back is not None and queue.give_back(paths, back) is not None
    refs = [view.item_ref(5, queue.item_name(t, 0)) for t in (1, 2, 3, 4)] + [
        view.item_ref(5, "t9-s0")]
    got = view.poll_items(paths, refs)
    assert [(got[r].state, got[r].restart_count) for r in refs] == [
        (R, 0), (D, 0), (P, 1), (P, 0), (JobState.UNKNOWN, 0)]
    assert got[refs[1]].exit_code == 81
    # a run's nodes are its Slurm node (what the bad-node rule counts), never the worker id;
    # a held item's node is not known until its result
    assert got[refs[1]].nodes == "n3" and got[refs[0]].nodes == ""
    view.cancel_items(paths, [refs[0], refs[3]])
    assert queue.killed(paths, "t1-s0")        # held: its worker kills the trial
    assert view.poll_items(paths, [refs[3]])[refs[3]].state == JobState.CANCELLED
    assert view.parse_item_ref("123_4") is None and view.parse_item_ref("pool:x:t1") is None


BASE = {"name": "p", "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}}}

SETTINGS = [
    (None, None),
    (True, WorkerPool(enabled=True)),
    (False, WorkerPool(enabled=False)),
    (3, WorkerPool(enabled=True, count=3)),
    (0, WorkerPool(enabled=False, count=0)),
    ({"preload": ["torch", "my_pkg.model"], "lease_timeout_s": 30},
     WorkerPool(enabled=True, preload=("torch", "my_pkg.model"), lease_timeout_s=30.0)),
    # a module:function entry: called in a spare process forked ahead of each trial
    ({"preload": ["torch", "torch.cuda:init"]},
     WorkerPool(enabled=True, preload=("torch", "torch.cuda:init"))),
    ({"enabled": False, "count": 2}, WorkerPool(enabled=False, count=2)),
]


@pytest.mark.parametrize("value,want", SETTINGS)
def test_workers_setting(value, want) -> None:
    raw = {**BASE, "slurm": {"workers": value}} if value is not None else BASE
    assert parse_experiment_config(raw).slurm.workers == want


@pytest.mark.parametrize("value,message", [
    (-1, "slurm.workers: expected true, false, a number of workers >= 0"),
    ("yes", "slurm.workers: expected true, false, a number of workers or a mapping"),
    ({"count": 2, "size": 3}, "slurm.workers.size: unknown field"),
    ({"preload": ["os; rm -rf /"]}, "slurm.workers.preload[0]: expected a module name"),
    ({"preload": ["torch.cuda:init()"]}, "slurm.workers.preload[0]: expected a module name"),
    ({"heartbeat_s": 10, "lease_timeout_s": 20}, "slurm.workers.lease_timeout_s: 20 is less"),
    ({"idle_exit_s": -1}, "slurm.workers.idle_exit_s: expected a number >= 0"),
])
def test_bad_workers_setting_names_the_field(value, message) -> None:
    with pytest.raises(ConfigError) as err:
        parse_experiment_config({**BASE, "slurm": {"workers": value}})
    assert message in str(err.value)


def test_site_default_applies_only_where_a_worker_can_run_the_trials() -> None:
    site = ClusterConfig(pools={"default": ResourcePool(name="default",
                                                        workers=WorkerPool(enabled=True))})
    plain = parse_experiment_config(BASE)
    launcher = parse_experiment_config({
        **BASE, "entrypoint": "python3 -m dethpc.launch.torch_distributed -- t.py"})
    managed, script = ExperimentKind.MANAGED, ExperimentKind.SCRIPT
    assert worker_pool_mode(plain, site, managed, "python3") is WorkerPoolMode.ON
    assert worker_pool_mode(plain, site, script, "python3") is WorkerPoolMode.OFF
    assert worker_pool_mode(launcher, site, managed, "python3") is WorkerPoolMode.OFF   # falls back
    asked = parse_experiment_config({**BASE, "entrypoint": launcher.entrypoint,
                                     "slurm": {"workers": True}})
    assert worker_pool_mode(asked, ClusterConfig(), managed, "python3") is WorkerPoolMode.REFUSED
    with pytest.raises(SubmitError, match="slurm.workers: the worker pool cannot run"):
        check_worker_pool(asked, ClusterConfig(), managed, "python3")
    off = parse_experiment_config({**BASE, "slurm": {"workers": False}})
    assert worker_pool_mode(off, site, managed, "python3") is WorkerPoolMode.OFF        # opted out


def test_new_workers_keep_off_the_experiments_bad_nodes(tmp_path: Path) -> None:
    """Runs that failed in a row on n2 (their exit records name the worker's node) send
    the pool's next worker array out with ``--exclude``, the pool's own exclude kept."""
    cluster = ClusterConfig(runs_root=tmp_path / "runs", pools={"default": ResourcePool(
        name="default", sbatch_args=("--exclude=n4",))})
    w = world(tmp_path, cluster=cluster, slurm={"workers": {"count": 2},
                                                "bad_nodes": {"failures": 2}})
    trials = w.add_trials(1, needs_job=False)
    now = time.time()
    w.add_batch(trials, ref="pool:1:t1-s{i}", nodes="n2", exit_reason=ExitReason.ERROR,
                ended_at=now - 5)
    w.add_batch(trials, name="b2", ref="pool:1:t1-s1", nodes="n2",
                exit_reason=ExitReason.ERROR, ended_at=now - 1)
    budget = SubmitBudget(w.store, w.cluster, w.backend, Scope())
    tender = WorkerPoolTender(w.store, w.cluster, w.backend, python="python3", tag="t",
                        budget=budget, files=None)  # type: ignore[arg-type]
    cfg = w.config()
    assert cfg.slurm.workers is not None
    tender.submit_workers(w.experiment(), cfg, cfg.slurm.workers, 2)
    assert w.backend.requests[-1].extra_args == ("--exclude=n4,n2",)
    assert any("with --exclude=n4,n2; n2: 2 failed runs in a row" in m
               for m in w.events("workers")), w.events()


@pytest.mark.parametrize(("state", "gone"), [
    (JobState.PENDING, True),        # requeued after its node crashed (or never started)
    (JobState.NODE_FAIL, True),
    (JobState.CANCELLED, True),
    (JobState.COMPLETED, True),
    (JobState.TIMEOUT, True),
    (JobState.RUNNING, False),       # completing is RUNNING too
    (JobState.SUSPENDED, False),     # stopped, renews nothing until it resumes
    (JobState.UNKNOWN, False),       # the poll could not tell
])
def test_gone_workers(state: JobState, gone: bool) -> None:
    workers = [view.Worker("7_0", JobState.RUNNING), view.Worker("7_1", state)]
    assert view.gone_workers(workers) == ({"7_1"} if gone else set())
