"""Het-job trials: the config section, the rendered script, component env and readiness."""

from __future__ import annotations

from pathlib import Path

import pytest

from dethpc.common.errors import ConfigError
from dethpc.config import parse_experiment_config
from dethpc.config.model import ClusterConfig, HetComponent, ResourcePool
from dethpc.jobs.jobscript import trial_script
from dethpc.launch._common import PORT_BASE, PORT_SPAN, LaunchError
from dethpc.launch.hetjob import (
    COMPONENT_PORT_OFFSET,
    Wait,
    component_env,
    parse_args,
    wait_for_file,
    wait_for_port,
    wait_ready,
)

BASE = {"name": "het", "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "resources": {"slots_per_trial": 2}}
CLUSTER = ClusterConfig(backend="slurm", pools={
    "default": ResourcePool(name="default", partition="debug", slots_per_node=2),
    "big": ResourcePool(name="big", partition="high", slots_per_node=4, qos="q")})


def cfg_with(components: list[dict]) -> object:
    return parse_experiment_config({**BASE, "slurm": {"components": components}})


def test_config_defaults() -> None:
    cfg = cfg_with([{"name": "server", "entrypoint": "python3 server.py"}])
    assert cfg.slurm.components == (HetComponent(name="server", entrypoint="python3 server.py"),)


@pytest.mark.parametrize(("component", "message"), [
    ({"name": "Server", "entrypoint": "x"}, "slurm.components[0].name: 'Server' is not allowed"),
    ({"name": "trial", "entrypoint": "x"}, "slurm.components[0].name: 'trial' is not allowed"),
    ({"entrypoint": "x"}, "slurm.components[0].name: required"),
    ({"name": "s"}, "slurm.components[0].entrypoint: required"),
    ({"name": "s", "entrypoint": "a 'b"}, "slurm.components[0].entrypoint: cannot split"),
    ({"name": "s", "entrypoint": "x", "nodes": 0}, "slurm.components[0].nodes: expected an "
                                                   "integer >= 1, got 0"),
    ({"name": "s", "entrypoint": "x", "ready": "tcp"},
     "slurm.components[0].ready: invalid value 'tcp'"),
    ({"name": "s", "entrypoint": "x", "ready_timeout": -1},
     "slurm.components[0].ready_timeout: expected an integer >= 1"),
    ({"name": "s", "entrypoint": "x", "gpus": 1}, "slurm.components[0].gpus: unknown field"),
    ("server", "slurm.components[0]: expected a mapping"),
])
def test_config_errors_name_the_field(component: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        cfg_with([component])  # type: ignore[list-item]
    assert message in str(info.value)


def test_config_repeated_name() -> None:
    with pytest.raises(ConfigError, match=r"components\[1\].name: 's' is used by another"):
        cfg_with([{"name": "s", "entrypoint": "x"}, {"name": "s", "entrypoint": "y"}])


def render(components: list[dict], backend: str = "slurm") -> str:
    return trial_script(cfg_with(components), CLUSTER, backend=backend,  # type: ignore[arg-type]
                        python="/py/python", run_dir=Path("/r"), exp_id=1, trial_id=2)


def test_script_directives_steps_and_wait() -> None:
    script = render([
        {"name": "server", "entrypoint": "python3 server.py '$(x)'"},
        {"name": "cache", "entrypoint": ["cache", "--size", "1 G"], "nodes": 2,
         "tasks_per_node": 2, "cpus_per_task": 3, "resource_pool": "big", "ready": "file",
         "ready_timeout": 9},
        {"name": "logger", "entrypoint": "log", "ready": "none"},
    ])
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    het = directives.index("#SBATCH hetjob")
    assert "#SBATCH --ntasks-per-node=2" in directives[:het]      # the trial's own group 0
    assert directives[het:] == [
        "#SBATCH hetjob", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=1", "#SBATCH --partition=debug",
        "#SBATCH hetjob", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2",
        "#SBATCH --cpus-per-task=3", "#SBATCH --partition=high", "#SBATCH --qos=q",
        "#SBATCH hetjob", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=1", "#SBATCH --partition=debug"]
    assert "export DETHPC_HET_COMPONENTS=trial,server,cache,logger\n" in script
    # each component's shape spelled out (25.11's srun would take the trial's SLURM_NTASKS)
    assert ("srun --het-group=1 --nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=1 "
            "--kill-on-bad-exit=1 /py/python -m dethpc.launch.hetjob "
            "--component server -- python3 server.py '$(x)' &\n") in script, script
    assert ("srun --het-group=2 --nodes=2 --ntasks=4 --ntasks-per-node=2 --cpus-per-task=3 "
            "--kill-on-bad-exit=1 /py/python -m dethpc.launch.hetjob "
            "--component cache -- cache --size '1 G' &\n") in script, script
    assert ("/py/python -m dethpc.launch.hetjob --trial --wait server:port:300 "
            "--wait cache:file:9 -- srun --ntasks=1 --nodes=1 --kill-on-bad-exit=1 "
            "python3 train.py &\n") in script
    # components start before the trial and are stopped after it
    assert script.index("--het-group=1") < script.index("hetjob --trial") < script.index(
        "kill $component_pids")


def test_no_components_no_het_lines() -> None:
    script = render([])
    assert "hetjob" not in script and "component_pids" not in script


def test_local_backend_renders_no_het_job() -> None:
    # submit refuses this combination; the renderer alone must still not emit srun lines
    script = render([{"name": "server", "entrypoint": "x"}], backend="local")
    assert "hetjob" not in script


def test_component_env() -> None:
    env = {"DETHPC_HET_COMPONENTS": "trial,server", "DETHPC_HET_JOB_ID": "100",
           "SLURM_JOB_ID": "101", "SLURM_JOB_NODELIST_HET_GROUP_0": "n1",
           "SLURM_JOB_NODELIST_HET_GROUP_1": "n[2-3]", "DETHPC_TRIAL_DIR": "/t",
           "SLURM_RESTART_COUNT": "2"}
    port = PORT_BASE + (100 + COMPONENT_PORT_OFFSET) % PORT_SPAN
    assert component_env(env) == {
        "DETHPC_COMPONENT_TRIAL_HOSTS": "n1", "DETHPC_COMPONENT_TRIAL_ADDR": "n1",
        "DETHPC_COMPONENT_TRIAL_PORT": str(port),
        "DETHPC_COMPONENT_TRIAL_READY_FILE": "/t/ready-trial-100-2",
        "DETHPC_COMPONENT_SERVER_HOSTS": "n2,n3", "DETHPC_COMPONENT_SERVER_ADDR": "n2",
        "DETHPC_COMPONENT_SERVER_PORT": str(port + 1),
        "DETHPC_COMPONENT_SERVER_READY_FILE": "/t/ready-server-100-2"}
    # without dethpc's export the het leader's id is used, never the step's own job id
    env2 = {k: v for k, v in env.items() if k != "DETHPC_HET_JOB_ID"}
    env2["SLURM_JOB_ID_HET_GROUP_0"] = "100"
    assert component_env(env2) == component_env(env)


@pytest.mark.parametrize(("argv", "want"), [
    (["--component", "server", "--", "s", "-x"], ("server", [], ["s", "-x"])),
    (["--trial", "--", "t"], (None, [], ["t"])),
    (["--trial", "--wait", "a:port:30", "--wait", "b:file:1.5", "--", "t"],
     (None, [Wait("a", "port", 30), Wait("b", "file", 1.5)], ["t"])),
])
def test_parse_args(argv: list[str], want: tuple) -> None:
    assert parse_args(argv) == want


@pytest.mark.parametrize(("argv", "message"), [
    (["--trial"], "usage"),
    (["--trial", "--"], "usage"),
    (["--trial", "--component", "s", "--", "x"], "exactly one"),
    (["--", "x"], "exactly one"),
    (["--component", "s", "--wait", "a:port:1", "--", "x"], "--wait belongs to --trial"),
    (["--trial", "--wait", "a:tcp:1", "--", "x"], "CHECK one of port, file, none"),
    (["--trial", "--wait", "a:port:soon", "--", "x"], "not a number"),
    (["--trial", "--bogus", "--", "x"], "unknown or incomplete option '--bogus'"),
])
def test_parse_args_errors(argv: list[str], message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        parse_args(argv)


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


def test_wait_for_file(tmp_path: Path) -> None:
    seen = []

    def exists(path: str) -> bool:
        seen.append(path)
        return len(seen) >= 2

    wait_for_file("/f", 60, exists)
    assert seen == ["/f", "/f"]
    with pytest.raises(LaunchError, match="did not appear"):
        wait_for_file(str(tmp_path / "never"), 0)


def test_wait_ready_unknown_component() -> None:
    with pytest.raises(LaunchError, match="no such component"):
        wait_ready([Wait("db", "port", 1)], {"DETHPC_HET_COMPONENTS": "trial"})


def test_wait_ready_file_and_none(tmp_path: Path) -> None:
    env = component_env({"DETHPC_HET_COMPONENTS": "trial,a,b", "DETHPC_HET_JOB_ID": "7",
                         "DETHPC_TRIAL_DIR": str(tmp_path)})
    ready_a = Path(env["DETHPC_COMPONENT_A_READY_FILE"])
    # "file" looks for a's ready file: absent, the wait fails
    with pytest.raises(LaunchError, match="did not appear"):
        wait_ready([Wait("a", "file", 0)], env)
    ready_a.touch()
    # present, it returns; "none" checks nothing: b has no ready file, no host, no port
    # that would answer, and yet the wait for it returns at once
    assert not Path(env["DETHPC_COMPONENT_B_READY_FILE"]).exists()
    assert env["DETHPC_COMPONENT_B_ADDR"] == ""
    assert wait_ready([Wait("a", "file", 0), Wait("b", "none", 0)], env) is None
    with pytest.raises(LaunchError, match="did not appear"):  # b would fail a real check
        wait_ready([Wait("b", "file", 0)], env)


def test_submit_refuses_components_on_the_local_backend(tmp_path: Path) -> None:
    from dethpc.backends.local import LocalBackend
    from dethpc.common.errors import DethpcError
    from dethpc.control.experiments import check_resources

    cfg = cfg_with([{"name": "server", "entrypoint": "x"}])
    with pytest.raises(DethpcError, match="heterogeneous job, which the local backend cannot"):
        check_resources(cfg, CLUSTER, LocalBackend(tmp_path / "spool"))  # type: ignore[arg-type]
