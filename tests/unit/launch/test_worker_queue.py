"""The pool's lease protocol and the fork server (dethpc.launch.worker): exactly one of N
concurrent claimers wins each item; an expired lease returns to the queue and its
worker's next heartbeat fails; a finished item is never re-queued; a preloaded module
is imported once per worker, not once per trial; exit codes map as in the job wrapper."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest

from dethpc.common import worker_queue as queue
from dethpc.common.exitcodes import ExitReason
from dethpc.launch.worker import forkserver
from dethpc.launch.worker.main import exit_reason


def _item(tmp: Path, trial: int, seq: int = 1) -> queue.WorkItem:
    return queue.WorkItem(trial_id=trial, seq=seq, argv=["python3", "train.py"],
                          env={"DETHPC_TRIAL_ID": str(trial)}, cwd=str(tmp),
                          trial_dir=str(tmp / f"t{trial}"))


def _claim_all(root: str, worker: str, out: mp.Queue) -> None:  # type: ignore[type-arg]
    paths = queue.WorkerPoolPaths(Path(root))
    got: list[str] = []
    while (lease := queue.claim(paths, worker)) is not None:
        got.append(lease.item.name)
    out.put((worker, got))


def test_concurrent_claims_each_item_exactly_once(tmp_path: Path) -> None:
    paths = queue.WorkerPoolPaths(tmp_path / "pool").create()
    for t in range(60):
        queue.enqueue(paths, _item(tmp_path, t))
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [ctx.Process(target=_claim_all, args=(str(paths.root), f"w{i}", out))
             for i in range(8)]
    for p in procs:
        p.start()
    claimed = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    names = [n for _, got in claimed for n in got]
    assert sorted(names) == sorted(queue.item_name(t, 1) for t in range(60))
    assert len(names) == len(set(names)) == 60
    assert queue.pending(paths) == []
    assert len(queue.active_leases(paths)) == 60


def test_expired_lease_returns_and_its_worker_loses_it(tmp_path: Path) -> None:
    paths = queue.WorkerPoolPaths(tmp_path / "pool").create()
    queue.enqueue(paths, _item(tmp_path, 1))
    queue.enqueue(paths, _item(tmp_path, 2))
    dead = queue.claim(paths, "dead")
    alive = queue.claim(paths, "alive")
    assert dead is not None and alive is not None
    old = time.time() - 100
    os.utime(dead.path, (old, old))
    assert queue.heartbeat(alive)
    back = queue.expire(paths, timeout_s=30)
    assert [(b.trial_id, b.attempt) for b in back] == [(dead.item.trial_id, 1)]
    assert queue.heartbeat(alive)
    assert not queue.heartbeat(dead)          # the late worker must stop its trial
    again = queue.claim(paths, "other")
    assert again is not None and again.item.attempt == 1
    assert again.item.trial_id == dead.item.trial_id
    assert queue.expire(paths, timeout_s=30) == []


@pytest.mark.parametrize(("age_s", "gone", "handed_back"), [
    (8.0, {"7_1"}, True),      # its job not running, a heartbeat missed: back at once
    (8.0, set(), False),       # its job running (or not polled fresh): the timeout decides
    (8.0, {"7_2"}, False),     # another worker's job gone
    (3.0, {"7_1"}, False),     # renewed within a heartbeat: alive whatever the poll said
    (100.0, set(), True),      # past lease_timeout_s: back as before
])
def test_a_lease_of_a_worker_whose_job_is_gone_goes_back_at_once(
        tmp_path: Path, age_s: float, gone: set[str], handed_back: bool) -> None:
    """A worker's node crashed and Slurm requeued its job: the next fresh poll sees the
    job PENDING, and the lease its worker stopped renewing goes back then, not 60 s
    after its last heartbeat (issue 48: a pool trial on a crashed node resumed 56-74 s
    after the crash)."""
    paths = queue.WorkerPoolPaths(tmp_path / "pool").create()
    queue.enqueue(paths, _item(tmp_path, 1))
    worker = queue.worker_id("7_1", 4242, "g3")
    lease = queue.claim(paths, worker)
    assert lease is not None and queue.job_of_worker(worker) == "7_1"
    old = time.time() - age_s
    os.utime(lease.path, (old, old))
    back = queue.expire(paths, timeout_s=60, gone=gone, missed_s=5.0)
    assert [b.trial_id for b in back] == ([1] if handed_back else [])
    assert queue.pending(paths) == ([f"{queue.item_name(1, 1)}.json"] if handed_back else [])


def test_a_worker_outside_a_job_is_never_gone(tmp_path: Path) -> None:
    """A worker outside a job (``<host>.<pid>``) names no job: only its timeout counts."""
    paths = queue.WorkerPoolPaths(tmp_path / "pool").create()
    queue.enqueue(paths, _item(tmp_path, 1))
    lease = queue.claim(paths, queue.worker_id("0", 99, "login1"))
    assert lease is not None
    old = time.time() - 30
    os.utime(lease.path, (old, old))
    assert queue.expire(paths, timeout_s=60, gone={"login1", "0", ""}, missed_s=5.0) == []


def test_a_claim_is_a_fresh_heartbeat_even_for_an_old_item(tmp_path: Path) -> None:
    paths = queue.WorkerPoolPaths(tmp_path / "pool").create()
    path = queue.enqueue(paths, _item(tmp_path, 1))
    old = time.time() - 1000
    os.utime(path, (old, old))
    lease = queue.claim(paths, "w")
    assert lease is not None
    assert queue.expire(paths, timeout_s=30) == []


def test_finished_item_is_not_requeued_after_a_crash(tmp_path: Path) -> None:
    paths = queue.WorkerPoolPaths(tmp_path / "pool").create()
    queue.enqueue(paths, _item(tmp_path, 3))
    lease = queue.claim(paths, "w")
    assert lease is not None
    res = queue.RunResult(trial_id=3, seq=1, reason="completed", code=0, worker="w",
                          start_s=0.0, wall_s=1.0)
    # the worker wrote its result and died before dropping the lease
    (paths.results / f"{lease.item.name}.json").write_text(res.to_json())
    old = time.time() - 100
    os.utime(lease.path, (old, old))
    assert queue.expire(paths, timeout_s=30) == []
    assert queue.pending(paths) == [] and queue.active_leases(paths) == []
    assert queue.take_results(paths) == [res]
    assert queue.take_results(paths) == []


def test_give_back_requeues_at_once(tmp_path: Path) -> None:
    paths = queue.WorkerPoolPaths(tmp_path / "pool").create()
    queue.enqueue(paths, _item(tmp_path, 4))
    lease = queue.claim(paths, "w")
    assert lease is not None
    again = queue.give_back(paths, lease)
    assert again is not None and again.attempt == 1
    assert queue.pending(paths) == [f"{lease.item.name}.json"]
    assert queue.give_back(paths, lease) is None


@pytest.mark.parametrize(("argv", "kind", "target", "args"), [
    (["python3", "train.py", "--x", "1"], forkserver.EntryKind.SCRIPT, "train.py", ("--x", "1")),
    (["python", "-u", "-m", "pkg.mod", "a"], forkserver.EntryKind.MODULE, "pkg.mod", ("a",)),
    (["python3.11", "t.py"], forkserver.EntryKind.SCRIPT, "t.py", ()),
    (["python3", "-O", "t.py"], forkserver.EntryKind.EXEC, "", ("python3", "-O", "t.py")),
    (["bash", "run.sh"], forkserver.EntryKind.EXEC, "", ("bash", "run.sh")),
    (["srun", "python3", "t.py"], forkserver.EntryKind.EXEC, "", ("srun", "python3", "t.py")),
])
def test_python_entry(argv: list[str], kind: forkserver.EntryKind, target: str,
                      args: tuple[str, ...]) -> None:
    assert forkserver.python_entry(argv) == forkserver.Entry(kind, target, args)


@pytest.mark.parametrize(("code", "signal", "reason"), [
    (0, "", ExitReason.COMPLETED), (80, "", ExitReason.PREEMPTED),
    (81, "", ExitReason.STOPPED), (81, "USR2", ExitReason.STOPPED),
    (1, "", ExitReason.ERROR), (137, "USR2", ExitReason.PREEMPTED),
    (0, "USR2", ExitReason.COMPLETED),
    # a run that failed on its own after the signal is an error, as a per-job trial's
    # (the pool had a rule of its own that called it preempted: issue 46 item 4)
    (1, "USR2", ExitReason.ERROR),
])
def test_exit_reason(code: int, signal: str, reason: ExitReason) -> None:
    """A pool run's reason is the one rule of every trial's run (run_end.exit_reason)."""
    from dethpc.launch.run_end import RunFacts, RunKind
    from dethpc.launch.run_end import exit_reason as trial_rule

    assert exit_reason(code, signal) is reason
    assert trial_rule(RunFacts(kind=RunKind.TRIAL, rc=code, signal=signal)) is reason


def _wait(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_fork_server_imports_once_and_isolates_trials(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    counter = tmp_path / "imports.txt"
    (tmp_path / "heavy_mod_for_test.py").write_text(
        f"open({str(counter)!r}, 'a').write('imported\\n')\nSTATE = []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    forkserver.preload(["heavy_mod_for_test"])
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys, heavy_mod_for_test as h\n"
        "h.STATE.append(os.environ['DETHPC_TRIAL_ID'])\n"
        "print('trial', os.environ['DETHPC_TRIAL_ID'], os.getcwd(), h.STATE, sys.argv)\n"
        "sys.exit(int(sys.argv[1]))\n")
    codes = []
    for trial, code in ((1, 0), (2, 81), (3, 80)):
        env = {"PATH": os.environ["PATH"], "DETHPC_TRIAL_ID": str(trial)}
        pid, started = forkserver.spawn(["python3", str(script), str(code)], env,
                                        str(tmp_path), tmp_path / "out.log")
        assert 0 <= started < 5
        codes.append(_wait(pid))
    assert codes == [0, 81, 80]
    assert counter.read_text() == "imported\n"     # paid once, in this process
    log = (tmp_path / "out.log").read_text()
    for trial in (1, 2, 3):                         # each trial saw only its own state
        assert f"trial {trial} {tmp_path} ['{trial}']" in log
    assert "heavy_mod_for_test" in __import__("sys").modules


def test_fork_server_reports_a_crash_and_runs_other_entrypoints_fresh(tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("raise ValueError('boom')\n")
    env = {"PATH": os.environ["PATH"]}
    pid, _ = forkserver.spawn(["python3", str(script)], env, str(tmp_path), tmp_path / "o.log")
    assert _wait(pid) == 1
    assert "ValueError: boom" in (tmp_path / "o.log").read_text()
    pid, _ = forkserver.spawn(["sh", "-c", "echo fresh $$; exit 7"], env, str(tmp_path),
                              tmp_path / "o.log")
    assert _wait(pid) == 7
    assert "fresh" in (tmp_path / "o.log").read_text()


def test_worker_array_script(tmp_path: Path) -> None:
    import subprocess

    from dethpc.config import parse_experiment_config
    from dethpc.config.model import ClusterConfig, ResourcePool
    from dethpc.jobs.worker_pool_items import worker_pool_problem
    from dethpc.jobs.worker_pool_script import worker_array_script

    cfg = parse_experiment_config({
        "name": "p", "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}}})
    cluster = ClusterConfig(pools={"default": ResourcePool(
        name="default", partition="debug", default_time="00:10:00", signal="USR2",
        signal_grace_s=60)})
    run_dir = tmp_path / "run dir $(x)"
    texts = {b: worker_array_script(cfg, cluster, backend=b, run_dir=run_dir, exp_id=3,
                                    python="/usr/bin/python3", preload=["torch"], tag="ab",
                                    batch_id=7, idle_exit_s=300)
             for b in ("slurm", "local")}
    for text in texts.values():
        script = tmp_path / "s.sh"
        script.write_text(text)
        assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
        assert "#SBATCH --signal=B:USR2@60" in text and "#SBATCH --requeue" in text
        assert "'--run-dir' " in text or f"--run-dir '{run_dir}'" in text
        assert "--preload torch" in text and "#SBATCH --job-name=dethpc-ab-e3-b7-pool" in text
        assert "--max-idle-s 300" in text
    assert "scontrol requeue" in texts["slurm"] and "scontrol" not in texts["local"]
    assert worker_pool_problem(cfg, "python3") == ""
    launcher = parse_experiment_config({
        "name": "p", "entrypoint": "python3 -m dethpc.launch.torch_distributed -- t.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}}})
    assert "launcher" in worker_pool_problem(launcher, "python3")


@pytest.mark.parametrize("runtime", ["apptainer", "charliecloud"])
def test_with_an_image_the_worker_runs_inside_it_and_its_items_run_warm(
        tmp_path: Path, runtime: str) -> None:
    """The worker array's command is the trial job's container command around the
    image's python running ``dethpc.launch.worker``; an item is the entrypoint as it runs in
    the image, without the runtime (which the fork server would have to exec fresh)."""
    import shlex

    from dethpc.config import parse_experiment_config
    from dethpc.config.model import ClusterConfig, ContainerSettings, ResourcePool
    from dethpc.jobs.jobscript import container_prefix
    from dethpc.jobs.worker_pool_items import work_item
    from dethpc.jobs.worker_pool_script import worker_array_script

    image = tmp_path / "image dir"
    cfg = parse_experiment_config({
        "name": "p", "entrypoint": "python3 train.py --x 1",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
        "environment": {"image": str(image)}})
    cluster = ClusterConfig(
        pools={"default": ResourcePool(name="default", partition="debug", signal="USR2")},
        containers=ContainerSettings(runtime=runtime,  # type: ignore[arg-type]
                                     python="/opt/venv/bin/python", sif_cache=tmp_path))
    run_dir = tmp_path / "run"
    text = worker_array_script(cfg, cluster, backend="slurm", run_dir=run_dir, exp_id=3,
                               python="/usr/bin/python3", preload=["torch"])
    # the command (PASS_ENV spans lines) between the signal's export and ` &`
    command = text.split("export DETHPC_PREEMPT_SIGNAL=USR2\n", 1)[1].split(" &\nchild=", 1)[0]
    argv = shlex.split(command)
    prefix = container_prefix(cfg, cluster, None, run_dir)
    assert prefix is not None
    assert argv[:len(prefix)] == prefix
    assert argv[len(prefix):len(prefix) + 3] == ["/opt/venv/bin/python", "-m",
                                                 "dethpc.launch.worker"]
    assert "/usr/bin/python3" not in argv
    item = work_item(cfg, cluster, backend="slurm", python="/usr/bin/python3",
                     run_dir=run_dir, exp_id=3, trial_id=1, seq=1)
    assert item.argv == ["/opt/venv/bin/python", "train.py", "--x", "1"]
    assert forkserver.python_entry(item.argv).kind is forkserver.EntryKind.SCRIPT


def test_withdraw_takes_only_unclaimed_items_of_the_trial(tmp_path: Path) -> None:
    paths = queue.WorkerPoolPaths(tmp_path / "pool").create()
    queue.enqueue(paths, _item(tmp_path, 1, seq=1))
    queue.enqueue(paths, _item(tmp_path, 11, seq=1))
    running = queue.claim(paths, "w")
    assert running is not None and running.item.trial_id == 1
    queue.enqueue(paths, _item(tmp_path, 1, seq=2))
    assert queue.withdraw(paths, 1) == ["t1-s2"]
    assert queue.pending(paths) == ["t11-s1.json"]            # t11 is another trial
    assert queue.heartbeat(running)


def test_retire_marks_workers_by_job_ref_and_keep_undoes_it(tmp_path: Path) -> None:
    paths = queue.WorkerPoolPaths(tmp_path / "pool").create()
    queue.retire(paths, ["12_2", "12_3"])
    assert [queue.retired(paths, f"12_{t}") for t in range(4)] == [False, False, True, True]
    queue.retire(paths, [], keep=["12_2"])
    assert [queue.retired(paths, f"12_{t}") for t in range(4)] == [False, False, False, True]
    assert not queue.retired(paths, "")


def test_kill_marks_an_item_and_known_sees_every_state(tmp_path: Path) -> None:
    paths = queue.WorkerPoolPaths(tmp_path / "pool").create()
    item = queue.WorkItem(trial_id=3, seq=1, argv=["true"], env={}, cwd="/", trial_dir="/",
                          ref="pool:1:t3-s1")
    assert not queue.known(paths, item.name)
    queue.enqueue(paths, item)
    assert queue.known(paths, item.name)                      # waiting
    lease = queue.claim(paths, "w0")
    assert lease is not None and lease.item.ref == "pool:1:t3-s1"
    assert queue.known(paths, item.name)                      # held
    assert not queue.killed(paths, item.name)
    queue.kill(paths, item.name)
    assert queue.killed(paths, item.name)
    queue.finish(paths, lease, queue.RunResult(trial_id=3, seq=1, reason="cancelled",
                                               code=137, worker="w0", start_s=0, wall_s=0))
    assert queue.known(paths, item.name)                      # ended
    assert not queue.known(paths, "t3-s2")


def test_a_work_items_json_is_its_fields_sorted_and_reads_back() -> None:
    """``to_json`` writes the fields as they are (no deep copy), the same text as
    ``asdict`` gave, and ``from_json`` reads it back equal."""
    import json
    from dataclasses import asdict

    from dethpc.common.worker_queue import WorkItem

    item = WorkItem(trial_id=3, seq=1, argv=["python3", "train.py"],
                    env={"B": "2", "A": "1"}, cwd="/r/context", trial_dir="/r/trials/3",
                    attempt=2, ref="pool:1:t3-s1")
    assert item.to_json() == json.dumps(asdict(item), sort_keys=True)
    assert WorkItem.from_json(item.to_json()) == item
