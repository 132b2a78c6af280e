"""The het-job script builder, component env and readiness wait."""

from __future__ import annotations

import subprocess

import pytest

from dethpc.launch._common import PORT_BASE, LaunchError
from dethpc.launch.hetjob import Component, build_hetjob_script, component_env, wait_for_port

COMPONENTS = [
    Component("server", ("python", "server.py"), partition="debug"),
    Component("trainer", ("python", "train.py", "--lr", "0.1 x"), nodes=2, ntasks_per_node=2,
              wait_for="server"),
]


def test_script_exact() -> None:
    script = build_hetjob_script(COMPONENTS, "het demo", python="/py", timeout_s=30)
    assert script == (
        "#!/bin/bash\n"
        "#SBATCH --job-name='het demo'\n"
        "#SBATCH --nodes=1 --ntasks-per-node=1 --cpus-per-task=1\n"
        "#SBATCH --partition=debug\n"
        "#SBATCH hetjob\n"
        "#SBATCH --nodes=2 --ntasks-per-node=2 --cpus-per-task=1\n"
        "export DETHPC_HET_COMPONENTS=server,trainer\n"
        "srun --het-group=0 --kill-on-bad-exit=1 /py -m dethpc.launch.hetjob --component server "
        "--timeout 30 -- python server.py &\n"
        "srun --het-group=1 --kill-on-bad-exit=1 /py -m dethpc.launch.hetjob --component trainer "
        "--timeout 30 --wait-for server -- python train.py --lr '0.1 x' &\n"
        "wait -n\ncode=$?\nwait\nexit $code\n")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


@pytest.mark.parametrize(("components", "message"), [
    ([], "at least one"),
    ([Component("Bad-Name", ("x",))], "must match"),
    ([Component("a", ("x",), wait_for="b")], "unknown 'b'"),
    ([Component("a", ("x",)), Component("a", ("y",))], "repeat"),
])
def test_invalid(components, message) -> None:
    with pytest.raises(LaunchError, match=message):
        build_hetjob_script(components, "j")


def test_component_env() -> None:
    env = {"DETHPC_HET_COMPONENTS": "server,trainer", "SLURM_HET_JOB_ID": "100",
           "SLURM_JOB_ID": "101", "SLURM_JOB_NODELIST_HET_GROUP_0": "n1",
           "SLURM_JOB_NODELIST_HET_GROUP_1": "n[2-3]"}
    assert component_env(env) == {
        "DETHPC_COMPONENT_SERVER_HOSTS": "n1", "DETHPC_COMPONENT_SERVER_ADDR": "n1",
        "DETHPC_COMPONENT_SERVER_PORT": str(PORT_BASE + 101),
        "DETHPC_COMPONENT_TRAINER_HOSTS": "n2,n3", "DETHPC_COMPONENT_TRAINER_ADDR": "n2",
        "DETHPC_COMPONENT_TRAINER_PORT": str(PORT_BASE + 102)}


def test_wait_for_port_retries_then_gives_up() -> None:
    calls = []

    def connect(addr):
        calls.append(addr)
        if len(calls) < 3:
            raise ConnectionRefusedError("refused")
        return object()

    wait_for_port("n1", 1, 60, connect)
    assert calls == [("n1", 1)] * 3

    def never(addr):
        raise ConnectionRefusedError("refused")

    with pytest.raises(LaunchError, match="did not accept connections"):
        wait_for_port("n1", 1, 0, never)
