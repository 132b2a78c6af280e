"""Shells, notebooks and commands as Slurm jobs on the dev cluster (docs/interactive.md):
``cmd run`` prints the node's output and passes the command's exit code through;
``shell start`` under a real pseudo-terminal runs what is typed in the allocation and
ends it; a kept shell is attached again and ``task kill`` leaves nothing in ``squeue``;
a notebook's JupyterLab answers with its token (403 without) on the node it reports,
and its idle timeout ends the job, as a kept shell's ends its allocation. The CLI runs
as a subprocess (its own exit code), on partition ``debug``."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, slurm_cluster: Any) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("interactive") / "home"
    home.mkdir()
    (home / "cluster.yaml").write_text(yaml.safe_dump({
        "backend": "slurm", "runs_root": str(home / "runs"), "python": sys.executable,
        "pools": {"default": {"partition": "debug", "slots_per_node": 1,
                              "cpus_per_slot": 1}}}))
    e = {**os.environ, "DETHPC_HOME": str(home),
         "DETHPC_CLUSTER_CONFIG": str(home / "cluster.yaml")}
    yield e
    for task in json.loads(cli(e, "task", "list", "--json").stdout):
        cli(e, "task", "kill", task["id"], check=False)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("model")
    (d / "startup-hook.sh").write_text("export HOOKED=\"yes it ran\"\n")
    (d / "data.txt").write_text("context file\n")
    return d


def cli(env: dict[str, str], *args: object, check: bool = True,
        timeout: float = 240) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def tasks(env: dict[str, str]) -> dict[int, dict[str, Any]]:
    return {t["id"]: t for t in json.loads(cli(env, "task", "list", "--all",
                                               "--json").stdout)}


def in_squeue(job: str) -> bool:
    return bool(subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True,
                               timeout=60).stdout.strip())


def test_cmd_run_passes_output_and_exit_code_through(env: dict[str, str], ctx: Path,
                                                     slurm_cluster: Any) -> None:
    code = ("import os; print('from', os.environ['SLURMD_NODENAME'], 'task', "
            "os.environ['DETHPC_TASK_ID'], '|', os.environ['HOOKED'], '|', "
            "open('data.txt').read().strip(), '|', os.environ['DETHPC_CONTEXT_DIR'] == "
            "os.getcwd())")
    ok = cli(env, "cmd", "run", "-c", ctx, "--", "python", "-c", code)
    line = next(x for x in ok.stdout.splitlines() if x.startswith("from "))
    node, task_id = line.split()[1], int(line.split()[3])
    assert node in slurm_cluster.nodes and line.endswith("| yes it ran | context file | True")
    bad = cli(env, "cmd", "run", "--", "python", "-c", "import sys; sys.exit(5)",
              check=False)
    assert bad.returncode == 5, bad.stderr
    detached = cli(env, "cmd", "run", "--detach", "--", "python", "-c", "print(6 * 7)")
    words = detached.stdout.split()          # command task ID: Slurm job J
    later_id, job = int(words[2].rstrip(":")), words[-1]
    logs = cli(env, "task", "logs", later_id, "--follow")
    assert logs.stdout.strip().splitlines()[-1] == "42"
    assert not in_squeue(job)
    rows = tasks(env)
    assert rows[task_id]["state"] == "ended" and rows[task_id]["kind"] == "command"
    assert rows[later_id]["state"] == "ended"
    assert [t for t in rows.values() if t["state"] == "failed"][-1]["message"] == \
        "exit code 5"


def _pty_run(argv: list[str], env: dict[str, str], typed: bytes, after: bytes,
             timeout: float = 180) -> tuple[int, str]:
    """Run ``argv`` on a new pseudo-terminal; type ``typed`` once ``after`` appeared."""
    master, slave = os.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    os.close(slave)
    out = b""
    sent = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 4096)
                except OSError:         # the other side closed: the process is done
                    data = b""
                if not data and proc.poll() is not None:
                    break
                out += data
            if not sent and after in out:
                os.write(master, typed)
                sent = True
            if proc.poll() is not None and not ready:
                break
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return rc, out.decode(errors="replace")


def test_a_shell_runs_what_is_typed_in_its_allocation_and_ends_it(
        env: dict[str, str], ctx: Path, slurm_cluster: Any) -> None:
    # typed once the shell says where it runs ("... on n1": a node of this lane's cluster)
    on_node = f" on {slurm_cluster.layout.node_prefix}".encode()
    rc, out = _pty_run([sys.executable, "-m", "dethpc.surfaces.cli.main", "shell", "start", "-c",
                        str(ctx)], env,
                       b'echo "JOB=$SLURM_JOB_ID NODE=$SLURMD_NODENAME HOOK=$HOOKED"; '
                       b'cat data.txt; exit\n', on_node)
    assert rc == 0, out
    shell = max((t for t in tasks(env).values() if t["kind"] == "shell"),
                key=lambda t: t["id"])
    assert f"JOB={shell['job']} NODE={shell['host']} HOOK=yes it ran" in out, out
    assert "context file" in out
    assert shell["state"] == "ended" and not in_squeue(shell["job"])


def test_a_kept_shell_is_attached_again_and_task_kill_ends_it(env: dict[str, str]) -> None:
    first = cli(env, "shell", "start", "--keep", "--", "bash", "-c", "echo $SLURM_JOB_ID")
    shell = max((t for t in tasks(env).values() if t["kind"] == "shell"),
                key=lambda t: t["id"])
    assert first.stdout.strip() == shell["job"] and shell["state"] == "running"
    assert in_squeue(shell["job"])
    again = cli(env, "shell", "open", shell["id"], "--", "bash", "-c",
                "echo again $SLURM_JOB_ID")
    assert again.stdout.strip() == f"again {shell['job']}"
    assert [t["id"] for t in json.loads(cli(env, "shell", "list", "--json").stdout)] == [
        shell["id"]]
    cli(env, "task", "kill", shell["id"])
    assert not in_squeue(shell["job"])
    assert tasks(env)[shell["id"]]["state"] == "ended"


def test_idle_timeouts_end_a_notebook_and_a_kept_shell(
        env: dict[str, str], ctx: Path) -> None:
    pytest.importorskip("jupyterlab")
    from dethpc.surfaces.tasks.notebook import status

    # meanwhile, a kept shell with nothing attached ends at its holder's first check
    cli(env, "shell", "start", "--keep", "--idle-timeout", "0.05", "--", "true")
    idle_shell = max((t for t in tasks(env).values() if t["kind"] == "shell"),
                     key=lambda t: t["id"])
    start = time.monotonic()
    out = json.loads(cli(env, "notebook", "start", ctx, "--idle-timeout", "0.25",
                         "--json").stdout)
    job, node, port, token = out["job"], out["host"], out["port"], out["token"]
    squeue_node = subprocess.run(["squeue", "-h", "-j", job, "-o", "%N"],
                                 capture_output=True, text=True, timeout=60).stdout.strip()
    assert node == squeue_node and out["endpoint"] == f"http://{node}:{port}/"
    assert out["ssh"].startswith(f"ssh -N -L 8888:{node}:{port} ")
    assert out["url"] == f"http://localhost:8888/lab?token={token}"
    assert status(node, port, token) == 200
    assert status(node, port, None) == 403
    assert status(node, port, "wrong") == 403
    listed = json.loads(cli(env, "notebook", "list", "--json").stdout)
    assert [t["id"] for t in listed] == [out["id"]]
    assert token not in json.dumps(listed)
    # jupyter_server checks once a minute: gone within about 60-75 s of its start
    deadline = time.monotonic() + 180
    while in_squeue(job) and time.monotonic() < deadline:
        time.sleep(2)
    assert not in_squeue(job), f"still in squeue {time.monotonic() - start:.0f} s on"
    row = tasks(env)[out["id"]]
    assert row["state"] == "ended", row
    while in_squeue(idle_shell["job"]) and time.monotonic() < deadline:
        time.sleep(2)
    assert not in_squeue(idle_shell["job"])
    assert "no shell attached for 3 s" in cli(env, "task", "logs", idle_shell["id"]).stdout
    assert tasks(env)[idle_shell["id"]]["state"] == "ended"
    assert "shutting down" in cli(env, "task", "logs", out["id"]).stdout
