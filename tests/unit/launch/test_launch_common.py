"""Table tests for the shared launcher core: Slurm env, layout, ports, arg parsing."""

from __future__ import annotations

import pytest

from dethpc.launch._common import (
    PORT_BASE,
    PORT_SPAN,
    JobLayout,
    LaunchError,
    Target,
    derive_port,
    gpu_env,
    parse_launcher_args,
    parse_tasks_per_node,
    rank_env,
    read_slurm_env,
    slurm_layout,
    socket_env,
    srun_argv,
    use_slurm,
    worker_env,
)

BATCH = {"SLURM_JOB_ID": "1234", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2",
         "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "0",
         "SLURM_NODEID": "0", "SLURM_LOCALID": "0"}
STEP = {**BATCH, "SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_NODEID": "1",
        "SLURM_LOCALID": "1", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}


@pytest.mark.parametrize(("text", "nnodes", "out"), [
    ("2(x2)", None, (2, 2)), ("4", 3, (4, 4, 4)), ("2(x3),1", None, (2, 2, 2, 1)),
    ("1", 1, (1,)),
])
def test_tasks_per_node(text, nnodes, out) -> None:
    assert parse_tasks_per_node(text, nnodes) == out


def test_tasks_per_node_garbage() -> None:
    with pytest.raises(LaunchError, match="cannot parse"):
        parse_tasks_per_node("two")


@pytest.mark.parametrize(("env", "in_step", "procid", "local_world", "hosts"), [
    (BATCH, False, 0, 2, ("n1", "n2")),
    (STEP, True, 3, 2, ("n1", "n2")),
    ({**BATCH, "SLURM_STEP_ID": "4294967294"}, False, 0, 2, ("n1", "n2")),  # batch step
    ({"SLURM_JOB_ID": "9", "SLURM_NODELIST": "gpu-[01-03]", "SLURM_NTASKS": "3"},
     False, 0, 1, ("gpu-01", "gpu-02", "gpu-03")),
])
def test_read_slurm_env(env, in_step, procid, local_world, hosts) -> None:
    senv = read_slurm_env(env)
    assert (senv.in_step, senv.procid, senv.local_world_size, senv.hosts) == (
        in_step, procid, local_world, hosts)
    assert senv.job_id == int(env["SLURM_JOB_ID"])


def test_port_rule() -> None:
    assert derive_port(1234) == PORT_BASE + 1234
    assert derive_port(None) == PORT_BASE
    # jobs within a window of PORT_SPAN ids never share a port
    ports = {derive_port(j) for j in range(500_000, 500_000 + PORT_SPAN)}
    assert len(ports) == PORT_SPAN
    assert max(ports) < 32768  # below Linux's ephemeral range
    assert derive_port(7, offset=1) == derive_port(8)


def test_layout_and_explicit_port() -> None:
    layout = slurm_layout(read_slurm_env(BATCH), BATCH)
    assert layout == JobLayout(("n1", "n2"), 2, "n1", PORT_BASE + 1234, 1234)
    assert layout.world_size == 4
    env = {**BATCH, "DETHPC_MASTER_PORT": "29500", "DETHPC_MASTER_ADDR": "n2-ib"}
    assert slurm_layout(read_slurm_env(env), env).master_port == 29500
    assert slurm_layout(read_slurm_env(env), env).master_addr == "n2-ib"


def test_uneven_tasks_refused() -> None:
    env = {**BATCH, "SLURM_TASKS_PER_NODE": "2,1", "SLURM_NTASKS": "3"}
    with pytest.raises(LaunchError, match="tasks per node differ"):
        slurm_layout(read_slurm_env(env), env)


@pytest.mark.parametrize(("env", "srun", "expected"), [
    (BATCH, "/usr/bin/srun", True),
    (BATCH, None, False),
    ({**BATCH, "DETHPC_BACKEND": "local"}, "/usr/bin/srun", False),
    ({}, "/usr/bin/srun", False),
])
def test_use_slurm(env, srun, expected) -> None:
    assert use_slurm(env, lambda _name: srun) is expected


def test_rank_env() -> None:
    layout = JobLayout(("n1", "n2"), 2, "n1", 15001)
    assert rank_env(layout, 3, 1, 1) == {
        "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1", "NODE_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "15001",
        # what Determined's DistributedContext.from_torch_distributed/from_deepspeed read
        "GROUP_WORLD_SIZE": "2", "LOCAL_SIZE": "2", "CROSS_RANK": "1", "CROSS_SIZE": "2"}


def test_worker_env_from_slurm_and_torchrun_wins() -> None:
    env = worker_env(STEP)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["NODE_RANK"],
            env["LOCAL_WORLD_SIZE"]) == ("3", "1", "4", "1", "2")
    torchrun_set = worker_env({**STEP, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "8"})
    assert (torchrun_set["RANK"], torchrun_set["WORLD_SIZE"]) == ("0", "8")


@pytest.mark.parametrize(("env", "out"), [
    ({"DETHPC_SOCKET_IFNAME": "ib0"},
     {"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "ib0", "HOROVOD_GLOO_IFACE": "ib0"}),
    ({"DETHPC_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "eth0"},
     {"GLOO_SOCKET_IFNAME": "ib0", "HOROVOD_GLOO_IFACE": "ib0"}),
    ({}, {}),
])
def test_socket_env(env, out) -> None:
    assert socket_env(env) == out


@pytest.mark.parametrize(("env", "local_rank", "world", "out"), [
    ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 1, 4, {}),  # isolation is opt-in
    ({"CUDA_VISIBLE_DEVICES": "0,1,2,3", "DETHPC_GPU_ISOLATION": "per-rank"}, 1, 4,
     {"CUDA_VISIBLE_DEVICES": "1"}),
    ({"CUDA_VISIBLE_DEVICES": "4,5,6,7", "DETHPC_GPU_ISOLATION": "per-rank"}, 1, 2,
     {"CUDA_VISIBLE_DEVICES": "6,7"}),
    ({"DETHPC_GPU_ISOLATION": "per-rank"}, 0, 2, {}),  # CPU node
])
def test_gpu_env(env, local_rank, world, out) -> None:
    assert gpu_env(env, local_rank, world) == out


def test_gpu_env_too_few_gpus() -> None:
    with pytest.raises(LaunchError, match="only 1 GPUs visible"):
        gpu_env({"CUDA_VISIBLE_DEVICES": "0", "DETHPC_GPU_ISOLATION": "per-rank"}, 0, 2)


@pytest.mark.parametrize(("argv", "target", "options", "overrides"), [
    (["train.py", "--lr", "1"], Target("file", "train.py", ("--lr", "1")), {}, ()),
    (["--max-restarts=2", "--", "train.py"], Target("file", "train.py"), {},
     ("--max-restarts=2",)),
    (["--mode", "torchrun", "--", "-m", "pkg.train", "x"],
     Target("module", "pkg.train", ("x",)), {"mode": "torchrun"}, ()),
    (["--mode=srun", "train.py"], Target("file", "train.py"), {"mode": "srun"}, ()),
    (["--mode", "srun", "train.py"], Target("file", "train.py"), {"mode": "srun"}, ()),
    (["--trial", "model_def:MyTrial"],
     Target("module", "dethpc.pytorch.run", ("model_def:MyTrial",)), {}, ()),
    (["--nproc-per-node", "2", "--trial", "m:C", "--"],
     Target("module", "dethpc.pytorch.run", ("m:C",)), {}, ("--nproc-per-node", "2")),
    (["--", "./run.sh", "a"], Target("command", "./run.sh", ("a",)), {}, ()),
])
def test_parse_launcher_args(argv, target, options, overrides) -> None:
    args = parse_launcher_args(argv, ("--mode",))
    assert (args.target, args.options, args.overrides) == (target, options, overrides)


@pytest.mark.parametrize("argv", [[], ["--"], ["--trial", "m:C", "--", "x.py"], ["--", "-m"]])
def test_parse_launcher_args_errors(argv) -> None:
    with pytest.raises(LaunchError):
        parse_launcher_args(argv, ("--mode",))


def test_target_argv() -> None:
    guard = ["py", "-m", "dethpc.launch._run_main"]
    assert Target("file", "t.py", ("a",)).python_argv("py") == [*guard, "t.py", "a"]
    assert Target("module", "m", ("a",)).python_argv("py") == [*guard, "-m", "m", "a"]
    assert Target("command", "./x", ("a",)).python_argv("py") == ["./x", "a"]
    assert Target("module", "m", ("a",)).tokens() == ["-m", "m", "a"]


def test_srun_argv() -> None:
    layout = JobLayout(("n1", "n2"), 2, "n1", 15001)
    assert srun_argv(layout) == ["srun", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2",
                                 "--kill-on-bad-exit=1"]
    assert srun_argv(layout, tasks_per_node=1, cpus_per_task=4, mpi="pmix", extra=["-l"]) == [
        "srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
        "--cpus-per-task=4", "--mpi=pmix", "-l"]


@pytest.mark.parametrize(("env", "want"), [
    ({}, ([], None)),
    ({"DETHPC_CONTAINER_EXEC": '["ch-run", "/img", "--"]', "DETHPC_CONTAINER_PYTHON": "/p"},
     (["ch-run", "/img", "--"], "/p")),
    # a task already in the image (inside a step) runs as it is
    ({"DETHPC_CONTAINER_EXEC": '["ch-run", "/img", "--"]', "SLURM_STEP_ID": "0"}, ([], None)),
])
def test_container_of(env: dict[str, str], want: tuple[list[str], str | None]) -> None:
    from dethpc.launch._common import container_of

    assert container_of(env) == want


@pytest.mark.parametrize("raw", ["not json", '{"a": 1}', "[1, 2]"])
def test_container_of_refuses_a_malformed_prefix(raw: str) -> None:
    from dethpc.launch._common import LaunchError, container_of

    with pytest.raises(LaunchError, match="DETHPC_CONTAINER_EXEC"):
        container_of({"DETHPC_CONTAINER_EXEC": raw})


def test_srun_workers_start_in_the_image() -> None:
    from dethpc.launch._common import slurm_layout, srun_workers_plan

    env = {**BATCH, "DETHPC_CONTAINER_EXEC": '["ch-run", "/img", "--"]',
           "DETHPC_CONTAINER_PYTHON": "/opt/venv/bin/python"}
    layout = slurm_layout(read_slurm_env(env), env)
    plan = srun_workers_plan(layout, ["/host/python", "train.py"], env, python="/host/python")
    argv = list(plan.argv)
    i = argv.index("ch-run")
    assert argv[0] == "srun" and argv[i:] == [
        "ch-run", "/img", "--", "/opt/venv/bin/python", "-m", "dethpc.launch._worker", "--",
        "/opt/venv/bin/python", "train.py"]


def test_a_task_of_a_step_without_srun_is_still_on_slurm() -> None:
    """Inside a container image there is no srun: a task of a step is still a Slurm
    task (its rank comes from the step), not a local launch."""
    assert use_slurm({**STEP, "DETHPC_BACKEND": "slurm"}, lambda _: None)
    assert not use_slurm({**BATCH, "DETHPC_BACKEND": "slurm"}, lambda _: None)
