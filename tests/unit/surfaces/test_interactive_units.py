"""Shells, notebooks and commands as Slurm jobs (``dethpc.surfaces.tasks.interactive`` and its
kinds), without Slurm: the config a task reads, its directives, the job script (run
with bash here, with a command full of quotes), the container wrapper, the notebook
wrapper's argv and endpoint file, the shell's srun line, ``task logs``' follow, and the
CLI's one-line refusals. The Slurm tier (tests/slurm/test_interactive_slurm.py) runs
them for real."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dethpc.common.errors import ConfigError, DethpcError
from dethpc.config import parse_cluster_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.store import Store
from dethpc.store.models import TaskKind, TaskState
from dethpc.surfaces.tasks import interactive, nbserve, registry, shell
from dethpc.surfaces.tasks.interactive import Job, render_script, task_config, task_directives
from dethpc.surfaces.tasks.logs import follow


# ------------------------------------------------------------------------- config
@pytest.mark.parametrize(("raw", "slots", "pool", "env"), [
    ({}, 1, None, {}),
    (None, 1, None, {}),
    # a Determined command/notebook/shell config: resources.slots, fields it ignores
    ({"resources": {"slots": 2, "resource_pool": "gpu"}, "entrypoint": "x",
      "idle_timeout": "30m", "notebook_idle_type": "kernels_or_terminals",
      "work_dir": "/w", "description": "d", "debug": False},
     2, "gpu", {}),
    # an experiment: its searcher, hyperparameters and entrypoint are not used
    ({"entrypoint": "python3 train.py", "name": "e",
      "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 3}},
      "hyperparameters": {"lr": {"type": "const", "val": 0.1}},
      "resources": {"slots_per_trial": 3},
      "environment": {"environment_variables": ["A=1", "B=x y"]}},
     3, None, {"A": "1", "B": "x y"}),
    # slots_per_trial wins over a command's slots
    ({"resources": {"slots": 2, "slots_per_trial": 4}}, 4, None, {}),
])
def test_task_config_keeps_resources_environment_and_ignores_the_rest(
        raw: Any, slots: int, pool: str | None, env: dict[str, str]) -> None:
    cfg = task_config(raw)
    assert cfg.resources.slots_per_trial == slots
    assert cfg.resources.resource_pool == pool
    assert dict(cfg.environment.environment_variables) == env


@pytest.mark.parametrize(("raw", "path"), [
    ({"foo": 1}, "foo"),
    ({"resources": {"slots_per_trial": "many"}}, "resources.slots_per_trial"),
    ({"slurm": {"sbatch_args": ["--requeue"]}}, "slurm.sbatch_args[0]"),
    ({"environment": {"environment_variables": 5}}, "environment.environment_variables"),
    ([1, 2], ""),
])
def test_task_config_errors_name_the_field(raw: Any, path: str) -> None:
    with pytest.raises(ConfigError) as exc:
        task_config(raw)
    assert path in [e.path for e in exc.value.errors], exc.value.message


def test_load_task_config_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        interactive.load_task_config(tmp_path / "nope.yaml")
    (tmp_path / "c.yaml").write_text("resources: {slots_per_trial: 2}\n")
    assert interactive.load_task_config(tmp_path / "c.yaml").resources.slots_per_trial == 2


# ---------------------------------------------------------------------- directives
POOL = ResourcePool(name="p", partition="debug", qos="normal", slots_per_node=2,
                    default_time="01:00:00", signal="USR1", sbatch_args=("--exclusive",))


@pytest.mark.parametrize(("raw", "expected"), [
    ({}, ["--job-name=dethpc-shell-7", "--comment=dethpc:task=7",
          "--output=/t/7/job.log", "--open-mode=append", "--no-requeue",
          "--partition=debug", "--qos=normal", "--time=01:00:00", "--nodes=1",
          "--ntasks-per-node=1", "--cpus-per-task=1", "--exclusive"]),
    # four slots on two-slot nodes: two nodes; the config's time and sbatch_args win
    ({"resources": {"slots_per_trial": 4},
      "slurm": {"time": "00:10:00", "sbatch_args": ["--cpus-per-task=3", "!--exclusive"]}},
     ["--job-name=dethpc-shell-7", "--comment=dethpc:task=7", "--output=/t/7/job.log",
      "--open-mode=append", "--no-requeue", "--partition=debug", "--qos=normal",
      "--time=00:10:00", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=3"]),
])
def test_task_directives_are_a_trials_shape_without_requeue_or_signal(
        raw: dict[str, Any], expected: list[str]) -> None:
    out = task_directives(task_config(raw), POOL, kind=TaskKind.SHELL, task_id=7,
                          output=Path("/t/7/job.log"))
    assert out == expected
    assert not any(d.startswith(("--requeue", "--signal")) for d in out)


# -------------------------------------------------------------------------- script
def _job(tmp_path: Path, command: list[str], env: list[tuple[str, str]],
         kind: TaskKind = TaskKind.COMMAND) -> Job:
    work = tmp_path / "task dir 'x'"
    work.mkdir()
    ctx = work / "context"
    ctx.mkdir()
    from dethpc.jobs.render import startup_hook_argv

    return Job(kind=kind, task_id=3, work_dir=work, cwd=ctx,
               directives=["--job-name=dethpc-command-3"], env=env, command=command,
               hook_command=startup_hook_argv(work / interactive.HOOK_ENV),
               python_bin=str(Path(sys.executable).parent))


NASTY = ["a b", "it's", '"q"', "$HOME", "`id`", "; echo pwned", "\\n", "*", ""]


def test_the_script_runs_the_command_literally_and_writes_its_exit_code(
        tmp_path: Path) -> None:
    code = ("import json, os, sys; print(json.dumps([sys.argv[1:], os.environ['WEIRD'], "
            "os.environ.get('FROM_HOOK'), os.getcwd()])); sys.exit(7)")
    job = _job(tmp_path, ["python", "-c", code, *NASTY],
               [("DETHPC_TASK_ID", "3"), ("WEIRD", "a'b $X `c` \"d\"")])
    (job.cwd / "startup-hook.sh").write_text("export FROM_HOOK=\"hooked $((1+1))\"\n")
    script = job.work_dir / "s.sbatch"
    script.write_text(render_script(job))
    res = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                         env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"},
                         check=False)
    assert res.returncode == 7, res.stderr
    args, weird, hooked, cwd = json.loads(res.stdout.strip().splitlines()[-1])
    assert args == NASTY
    assert weird == "a'b $X `c` \"d\""
    assert hooked == "hooked 2"
    assert cwd == str(job.cwd)
    assert (job.work_dir / registry.EXIT_FILE).read_text().strip() == "7"


def test_a_failing_startup_hook_is_the_commands_failure(tmp_path: Path) -> None:
    job = _job(tmp_path, ["python", "-c", "print('ran')"], [])
    (job.cwd / "startup-hook.sh").write_text("false\n")
    script = job.work_dir / "s.sbatch"
    script.write_text(render_script(job))
    res = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert res.returncode == 1 and "ran" not in res.stdout
    assert "startup-hook.sh failed" in res.stderr
    assert (job.work_dir / registry.EXIT_FILE).read_text().strip() == "1"


def test_the_shells_holder_waits_for_steps_and_writes_ready(tmp_path: Path) -> None:
    job = replace(_job(tmp_path, [], [], TaskKind.SHELL), idle_timeout_s=1800)
    text = render_script(job)
    assert "squeue -h -s -j \"$SLURM_JOB_ID\"" in text and "idle=1800" in text
    assert f': >"$TASK_DIR/{interactive.READY_FILE}"' in text
    assert "--requeue" not in text


# -------------------------------------------------------------- prepare, containers
def _cluster(tmp_path: Path, runtime: str = "none") -> ClusterConfig:
    return parse_cluster_config({
        "backend": "slurm", "runs_root": str(tmp_path / "runs"),
        "containers": {"runtime": runtime, "sif_cache": str(tmp_path / "sif"),
                       "cleanenv": False},
        "pools": {"default": {"partition": "debug"},
                  "spot": {"partition": "low", "preemptible": True}}})


def test_prepare_wraps_the_command_in_the_image_and_binds_the_task_dir(
        home: Path, tmp_path: Path) -> None:
    store = Store()
    cfg = task_config({"environment": {"image": "docker://python:3.11"}})
    prep = interactive.prepare(store, _cluster(tmp_path, "apptainer"), TaskKind.COMMAND,
                               config=cfg, pool_name=None, context=None,
                               command=["python", "x.py"])
    w = str(prep.job.work_dir)
    assert prep.job.command[:2] == ["apptainer", "exec"]
    assert ["--bind", w] == prep.job.command[2:4]
    assert prep.job.command[-2:] == ["python3", "x.py"]      # the image's python
    assert prep.job.hook_command[:2] == ["apptainer", "exec"]
    assert prep.job.cwd == Path.cwd()
    st = os.stat(w)
    assert stat.S_IMODE(st.st_mode) == 0o700
    # no image, or runtime none: no wrapper
    plain = interactive.prepare(store, _cluster(tmp_path), TaskKind.COMMAND, config=cfg,
                                pool_name=None, context=None, command=["python", "x.py"])
    assert plain.job.command == ["python", "x.py"] and plain.prefix is None


def test_prepare_copies_the_context_and_warns_of_a_preemptible_pool(
        home: Path, tmp_path: Path) -> None:
    ctx = tmp_path / "model"
    ctx.mkdir()
    (ctx / "train.py").write_text("x")
    (ctx / "big.bin").write_text("y")
    (ctx / ".detignore").write_text("*.bin\n")
    warned: list[str] = []
    prep = interactive.prepare(Store(), _cluster(tmp_path), TaskKind.NOTEBOOK,
                               config=task_config({}), pool_name="spot", context=ctx,
                               command=lambda w: ["python", "-m", "x", str(w)],
                               warn=warned.append)
    assert prep.job.cwd == prep.job.work_dir / "context"
    assert sorted(p.name for p in prep.job.cwd.iterdir()) == [".detignore", "train.py"]
    assert ("DETHPC_CONTEXT_DIR", str(prep.job.cwd)) in prep.job.env
    assert prep.job.command[-1] == str(prep.job.work_dir)
    assert "--partition=low" in prep.job.directives
    assert len(warned) == 1 and "preemptible" in warned[0] and "not requeued" in warned[0]


def test_prepare_refuses_a_shell_on_the_local_backend_and_a_missing_context(
        home: Path, tmp_path: Path) -> None:
    """A shell needs ``srun --overlap``: refused on the local backend, naming what runs
    there instead; a command there is prepared, its job told the backend's real name."""
    local = replace(_cluster(tmp_path), backend="local")
    with pytest.raises(DethpcError, match="srun --overlap.*dethpc cmd run"):
        interactive.prepare(Store(), local, TaskKind.SHELL, config=task_config({}),
                            pool_name=None, context=None, command=[])
    prep = interactive.prepare(Store(), local, TaskKind.COMMAND, config=task_config({}),
                               pool_name=None, context=None, command=["true"])
    assert ("DETHPC_BACKEND", "local") in prep.job.env and prep.task.backend == "local"
    prep.record.give_back()
    prep = interactive.prepare(Store(), _cluster(tmp_path), TaskKind.COMMAND,
                               config=task_config({}), pool_name=None, context=None,
                               command=["true"])
    assert ("DETHPC_BACKEND", "slurm") in prep.job.env and prep.task.backend == "slurm"
    prep.record.give_back()
    with pytest.raises(DethpcError, match="--context: .* is not a directory"):
        interactive.prepare(Store(), _cluster(tmp_path), TaskKind.SHELL,
                            config=task_config({}), pool_name=None,
                            context=tmp_path / "nope", command=[])


def test_finish_reads_the_exit_code(home: Path, tmp_path: Path) -> None:
    store = Store()
    rows = []
    for kind, code in ((TaskKind.COMMAND, "0"), (TaskKind.COMMAND, "3"),
                       (TaskKind.COMMAND, None), (TaskKind.SHELL, None)):
        task = registry.create(store, kind, [], 0)
        work = registry.task_dir(task.id or 0)
        if code is not None:
            (work / registry.EXIT_FILE).write_text(code + "\n")
        task = registry.update(store, task.id or 0, work_dir=str(work))
        rows.append(registry.finish(store, task))
    assert [(t.state, t.message) for t in rows] == [
        (TaskState.ENDED, "exit code 0"), (TaskState.FAILED, "exit code 3"),
        (TaskState.FAILED, "the job ended without an exit code (cancelled, or out of "
                           "time?)"),
        (TaskState.ENDED, "ended")]


# ------------------------------------------------------------------ notebook, shell
def test_the_notebook_wrapper_argv_has_no_token_and_jupyters_idle_settings() -> None:
    argv = nbserve.jupyter_argv("/py", address="10.0.0.5", port=4321, root=Path("/ctx"),
                                idle_timeout_s=90)
    assert argv[:4] == ["/py", "-m", "jupyterlab", "--no-browser"]
    for opt in ("--ServerApp.ip=10.0.0.5", "--ServerApp.port=4321",
                "--ServerApp.port_retries=0", "--ServerApp.root_dir=/ctx",
                "--ServerApp.shutdown_no_activity_timeout=90",
                "--MappingKernelManager.cull_idle_timeout=90",
                "--MappingKernelManager.cull_interval=60",
                "--TerminalManager.cull_inactive_timeout=90"):
        assert opt in argv
    assert not any("token" in a.lower() for a in argv)
    never = nbserve.jupyter_argv("/py", address="a", port=1, root=Path("/"),
                                 idle_timeout_s=0)
    assert not any("timeout" in a for a in never)


def test_the_notebook_wrapper_resolves_its_node_and_writes_the_endpoint_atomically(
        tmp_path: Path) -> None:
    assert nbserve.node_address({"SLURMD_NODENAME": "localhost"}) == ("localhost",
                                                                      "127.0.0.1")
    port = nbserve.free_port("127.0.0.1")
    assert 0 < port < 65536
    path = nbserve.write_endpoint(tmp_path, "n3", "127.0.0.1", port)
    assert json.loads(path.read_text()) == {"host": "n3", "address": "127.0.0.1",
                                            "port": port}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not (tmp_path / "endpoint.json.tmp").exists()


def test_the_notebook_wrapper_refuses_to_start_without_its_token_file(
        tmp_path: Path) -> None:
    assert nbserve.main(["--task-dir", str(tmp_path)]) == 2
    assert not (tmp_path / nbserve.ENDPOINT).exists()


@pytest.mark.parametrize(("prefix", "command", "pty", "tail"), [
    (None, [], True, ["--pty", "bash", "-i"]),
    (None, ["hostname"], False, ["hostname"]),
    (["apptainer", "exec", "img.sif"], [], True,
     ["--pty", "apptainer", "exec", "img.sif", "bash", "-i"]),
])
def test_the_shell_attaches_with_one_overlapping_task(
        prefix: list[str] | None, command: list[str], pty: bool, tail: list[str]) -> None:
    argv = shell.srun_argv("42", Path("/c d"), prefix, command, pty=pty)
    assert argv[:7] == ["srun", "--jobid=42", "--overlap", "--nodes=1", "--ntasks=1",
                        "--chdir=/c d", "--quiet"]
    assert argv[7:] == tail


# ------------------------------------------------------------------------- logs
def test_follow_copies_until_the_task_ends(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    done = threading.Event()
    out: list[bytes] = []

    def writer() -> None:
        for i in range(3):
            with open(log, "ab") as fh:
                fh.write(f"line {i}\n".encode())
            time.sleep(0.1)
        done.set()

    threading.Thread(target=writer).start()
    follow(log, lambda: not done.is_set(), out.append, poll_s=0.02)
    assert b"".join(out) == b"line 0\nline 1\nline 2\n"
    assert follow(log, lambda: True, out.append, follow=False, offset=7) == 21


# -------------------------------------------------------------------------- CLI
@pytest.mark.parametrize(("args", "words"), [
    (["cmd", "run"], "COMMAND: name the command to run"),
    (["shell", "start", "--idle-timeout", "-1"], "--idle-timeout: -1 is negative"),
    (["notebook", "start", "--config", "/nonexistent.yaml"], "file not found"),
    (["shell", "start"], "attaches to a Slurm allocation with `srun --overlap`"),
    (["task", "logs", "99"], "task 99 does not exist"),
])
def test_the_cli_refuses_bad_input_in_one_line(home: Path, args: list[str], words: str,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from dethpc.surfaces.cli.main import main

    monkeypatch.setattr(sys, "argv", ["dethpc", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code not in (0, None)
    assert words in " ".join(err.split()), err
    assert "Traceback" not in err
