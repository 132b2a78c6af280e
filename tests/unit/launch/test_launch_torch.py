"""Exact argv/env of the torch_distributed launcher in every situation."""

from __future__ import annotations

import pytest

from dethpc.launch import torch_distributed as td
from dethpc.launch._common import PORT_BASE, JobLayout, LaunchError, Target

PY = "/py"
SRUN = lambda _name: "/usr/bin/srun"  # noqa: E731
BATCH = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2",
         "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_CPUS_PER_TASK": "3"}
PORT = str(PORT_BASE + 77)
SHIM = [PY, "-m", "dethpc.launch._worker", "--"]
GUARD = [PY, "-m", "dethpc.launch._run_main"]  # every Python rank runs under the exit guard


def test_srun_mode_from_batch() -> None:
    plan = td.plan(["--", "train.py", "--lr", "1"], BATCH, SRUN, PY)
    assert list(plan.argv) == [
        "srun", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "--kill-on-bad-exit=1",
        *SHIM, *GUARD, "train.py", "--lr", "1"]
    assert (plan.env["MASTER_ADDR"], plan.env["MASTER_PORT"], plan.env["WORLD_SIZE"],
            plan.env["LOCAL_WORLD_SIZE"]) == ("n1", PORT, "4", "2")
    assert len(plan.workers) == 1 and not plan.workers[0].prefix


def test_srun_mode_overrides_go_to_srun() -> None:
    plan = td.plan(["--exclusive", "--", "train.py"], BATCH, SRUN, PY)
    assert list(plan.argv)[:6] == ["srun", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2",
                                   "--kill-on-bad-exit=1", "--exclusive"]


def test_torchrun_mode_from_batch_reenters_per_node() -> None:
    plan = td.plan(["--mode", "torchrun", "--max-restarts=1", "--", "-m", "pkg.train"],
                   BATCH, SRUN, PY)
    assert list(plan.argv) == [
        "srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
        "--cpus-per-task=6", PY, "-m", "dethpc.launch.torch_distributed", "--mode", "torchrun",
        "--max-restarts=1", "--", "-m", "pkg.train"]
    assert (plan.env["DETHPC_MASTER_ADDR"], plan.env["DETHPC_MASTER_PORT"],
            plan.env["DETHPC_NPROC_PER_NODE"]) == ("n1", PORT, "2")


def test_torchrun_mode_inside_step_execs_torchrun() -> None:
    env = {**BATCH, "SLURM_STEP_ID": "0", "SLURM_NODEID": "1", "SLURM_STEP_NUM_TASKS": "2",
           "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
           "DETHPC_NPROC_PER_NODE": "2", "DETHPC_MASTER_PORT": PORT,
           "DETHPC_LAUNCH_MODE": "torchrun"}
    plan = td.plan(["--max-restarts=1", "--", "train.py", "x"], env, SRUN, PY)
    assert plan.kind == "exec"
    assert list(plan.argv) == [
        PY, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2", "--node-rank=1",
        "--master-addr=n1",
        f"--master-port={PORT}", "--max-restarts=1", "--no-python", *SHIM, *GUARD, "train.py", "x"]


def test_torchrun_inside_step_needs_one_task_per_node() -> None:
    env = {**BATCH, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4"}
    with pytest.raises(LaunchError, match="one task per node"):
        td.plan(["--mode", "torchrun", "--", "train.py"], env, SRUN, PY)


def test_srun_mode_inside_step_is_one_rank() -> None:
    env = {**BATCH, "SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
           "SLURM_NODEID": "1"}
    plan = td.plan(["train.py"], env, SRUN, PY)
    (worker,) = plan.workers
    assert list(worker.argv) == [*GUARD, "train.py"] and worker.rank == 3 and worker.prefix
    assert (worker.env["RANK"], worker.env["LOCAL_RANK"], worker.env["MASTER_ADDR"]) == (
        "3", "1", "n1")


@pytest.mark.parametrize(("env", "argv", "nproc"), [
    ({}, ["train.py"], 1),
    ({"DETHPC_NPROC": "3"}, ["train.py"], 3),
    ({**BATCH, "DETHPC_BACKEND": "local"}, ["train.py"], 4),  # local backend sets SLURM_NTASKS
    # the local backend's job sets SLURM_NTASKS=1 and the trial's slots (found on a GPU
    # machine: slots_per_trial 2 started one rank)
    ({"SLURM_NTASKS": "1", "DETHPC_BACKEND": "local", "DETHPC_SLOTS_PER_TRIAL": "2"},
     ["train.py"], 2),
    ({"DETHPC_NPROC": "3", "DETHPC_SLOTS_PER_TRIAL": "2"}, ["train.py"], 3),
    ({}, ["--nproc-per-node=2", "--", "train.py"], 2),
])
def test_local_launch(env, argv, nproc) -> None:
    plan = td.plan(argv, env, lambda _n: None, PY)
    assert [w.rank for w in plan.workers] == list(range(nproc))
    assert [w.env["RANK"] for w in plan.workers] == [str(r) for r in range(nproc)]
    assert {w.env["WORLD_SIZE"] for w in plan.workers} == {str(nproc)}
    assert {w.env["MASTER_ADDR"] for w in plan.workers} == {"127.0.0.1"}
    assert all(list(w.argv) == [*GUARD, "train.py"] for w in plan.workers)


def test_trial_target() -> None:
    plan = td.plan(["--trial", "model_def:MyTrial"], BATCH, SRUN, PY)
    assert list(plan.argv)[-6:] == [*GUARD, "-m", "dethpc.pytorch.run", "model_def:MyTrial"]


def test_bad_mode() -> None:
    with pytest.raises(LaunchError, match="unknown launch mode 'mpi'"):
        td.plan(["--mode", "mpi", "--", "t.py"], BATCH, SRUN, PY)


def test_build_argv_pure() -> None:
    layout = JobLayout(("a", "b", "c"), 4, "a", 15500, 500)
    argv = td.build_argv("torchrun", Target("file", "t.py"), layout, in_step=True, node_rank=2,
                         python=PY)
    assert argv[:8] == [PY, "-m", "torch.distributed.run", "--nnodes=3", "--nproc-per-node=4",
                        "--node-rank=2", "--master-addr=a", "--master-port=15500"]
    env = td.build_env("srun", layout, {"DETHPC_SOCKET_IFNAME": "ib0"}, in_step=False)
    assert (env["WORLD_SIZE"], env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == (
        "12", "ib0", "ib0")
