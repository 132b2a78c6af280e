"""Interactive tasks on the local backend (issue 46 item 1): with a cluster config whose
backend is ``local`` (no Slurm), ``dethpc cmd run`` runs the command as a local job,
follows its output (the task's ``job.log``, where the local backend now writes the
job's output) and exits with its exit code; ``dethpc task kill`` stops a running local
command (its process is gone); a notebook (the real JupyterLab in the venv) starts,
answers with its token, and is stopped; ``task list`` shows each with its backend.
The same commands on Slurm: tests/slurm/test_interactive_slurm.py."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.local.conftest import cli, wait_for


def _tasks() -> dict[int, dict[str, object]]:
    rows = json.loads(cli("task", "list", "--all", "--json").stdout)
    return {int(r["id"]): r for r in rows}


def _gone(pid: int) -> bool:
    """No such process, or only its zombie is left."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_cmd_run_follows_its_output_and_exits_with_its_code(home: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code = ("import os, sys; print('hello from', os.environ['DETHPC_BACKEND'], "
            "os.environ['DETHPC_TASK_KIND'], os.getcwd()); sys.exit(3)")
    proc = cli("cmd", "run", "--", "python3", "-c", code, check=False)
    assert proc.returncode == 3, proc.stderr
    assert f"hello from local command {work}" in proc.stdout, (proc.stdout, proc.stderr)
    assert re.search(r"command task (\d+): local job \d+", proc.stderr), proc.stderr
    task_id = int(re.search(r"command task (\d+)", proc.stderr).group(1))  # type: ignore[union-attr]
    row = _tasks()[task_id]
    assert row["kind"] == "command" and row["backend"] == "local"
    assert row["state"] == "failed" and "exit code 3" in str(row["message"])
    assert row["job"]
    assert "hello from local" in cli("task", "logs", task_id).stdout
    ok = cli("cmd", "run", "--", "python3", "-c", "print('fine')")
    assert ok.stdout.strip().splitlines()[-1] == "fine"
    assert _tasks()[task_id + 1]["state"] == "ended"


def test_task_kill_stops_a_running_local_command(home: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    code = (f"import os, time; open({str(pid_file)!r} + '.tmp', 'w').write(str(os.getpid()));"
            f" os.rename({str(pid_file)!r} + '.tmp', {str(pid_file)!r});"
            " print('started', flush=True); time.sleep(600)")
    proc = cli("cmd", "run", "--detach", "--", "python3", "-c", code)
    task_id = int(re.search(r"command task (\d+): local job", proc.stdout).group(1))  # type: ignore[union-attr]
    wait_for(pid_file.exists, timeout=60, what="the command to start")
    pid = int(pid_file.read_text())
    assert not _gone(pid)
    live = json.loads(cli("task", "list", "--json").stdout)
    assert [(r["id"], r["kind"], r["backend"]) for r in live] == [(task_id, "command",
                                                                   "local")]
    cli("task", "kill", task_id)
    wait_for(lambda: _gone(pid), timeout=30, what="the command's process to end")
    row = _tasks()[task_id]
    assert row["state"] == "ended" and "stopped by `task kill`" in str(row["message"])
    assert json.loads(cli("task", "list", "--json").stdout) == []


def _status(url: str, token: str) -> int:
    req = urllib.request.Request(url + "api/status",
                                 headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - http only
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_notebook_starts_and_is_stopped_on_the_local_backend(home: Path,
                                                                tmp_path: Path) -> None:
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed in this venv: "
                        "pip install 'dethpc[notebook]'")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "train.py").write_text("print('x')\n")
    started = json.loads(cli("notebook", "start", ctx, "--json", timeout=300).stdout)
    task_id, token, port = int(started["id"]), str(started["token"]), int(started["port"])
    assert started["backend"] == "local" and started["state"] == "running"
    url = str(started["endpoint"])
    assert url == f"http://{started['host']}:{port}/"
    assert _status(url, token) == 200
    assert _status(url, "wrong") == 403
    job_log = Path(home / "tasks" / str(task_id) / "job.log")
    assert job_log.is_file() and job_log.stat().st_size > 0
    live = json.loads(cli("notebook", "list", "--json").stdout)
    assert [(r["id"], r["backend"]) for r in live] == [(task_id, "local")]
    cli("notebook", "stop", task_id)

    def refused() -> bool:
        try:
            _status(url, token)
        except OSError:
            return True
        return False

    wait_for(refused, timeout=30, what="JupyterLab to stop answering")
    assert _tasks()[task_id]["state"] == "ended"
    assert os.stat(home / "tasks" / str(task_id)).st_mode & 0o777 == 0o700
