"""``dethpc sbatch``'s light path (``dethpc.surfaces.cli.fastsbatch``, issue 47 item 1):
which commands it leaves to the full CLI, decided before anything is read, written or
printed; and, for one it answers, the same bytes and exit code as the typer command
without its imports. (The submission itself, on the dev cluster:
tests/slurm/test_sbatch_fast_slurm.py.)"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dethpc.store import Store
from dethpc.surfaces.cli import fastsbatch

#: what the light path must never import (the ORM, typer, the job side's torch, Jinja2:
#: the wrapper is written by ``dethpc.jobs.wrapper_text``)
FORBIDDEN = ("sqlalchemy", "sqlmodel", "pydantic", "alembic", "typer", "click", "torch",
             "jinja2")
#: runs the console script's main in this process and says, at exit, what was imported
DRIVER = """
import atexit, json, os, sys
def _said():
    with open(os.environ["MODULES_OUT"], "w") as f:
        json.dump(sorted({m.split(".")[0] for m in sys.modules}), f)
atexit.register(_said)
from dethpc.surfaces.entry import main
main(sys.argv[1:])
"""


def make_home(tmp_path: Path, cluster: str = "backend: slurm\n", *,
              store: bool = True) -> Path:
    """A home whose cluster config names ``cluster`` (its runs under the home) and, with
    ``store``, whose SQLite store is at head."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "c.yaml").write_text(f"{cluster}runs_root: {home}/runs\n")
    if store:
        Store(f"sqlite:///{home / 'dethpc.db'}")
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH -t 1\necho hi\n")
    (tmp_path / "no-shebang.sh").write_text("echo hi\n")
    return home


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    made = make_home(tmp_path)
    for name in [n for n in os.environ if n.startswith(("DETHPC_", "XDG_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DETHPC_HOME", str(made))
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(tmp_path / "c.yaml"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return made


NOT_MINE = [
    ([], {}), (["--help"], {}), (["-h"], {}), (["--no-daemon", "--help-sbatch"], {}),
    (["--version"], {}), (["--usage"], {}), (["-V"], {}),
    (["--search", "s.yaml", "job.sh"], {}), (["--parsable", "--search=s.yaml", "job.sh"], {}),
    (["job.sh"], {"DETHPC_FAST_SBATCH": "0"}),
    (["job.sh"], {"DETHPC_DATABASE_URL_FILE": "/nonexistent/url"}),
]


@pytest.mark.parametrize(("args", "env"), NOT_MINE,
                         ids=[" ".join(a) + "".join(f" {k}={v}" for k, v in e.items())
                              for a, e in NOT_MINE])
def test_left_to_the_full_cli(home: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str], args: list[str],
                              env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert fastsbatch.answer(args) is None
    assert capsys.readouterr() == ("", "")
    assert not (home / "runs").exists()


STATES = [
    ("a local backend", "backend: local\n", True, None),
    ("its own database", "backend: slurm\ndatabase_url: postgresql://db.example/d\n", True,
     None),
    ("an invalid config", "backend: slurm\npools: 3\n", True, None),
    ("no store yet", "backend: slurm\n", False, None),
    ("a store not at head", "backend: slurm\n", True, "0001"),
]


@pytest.mark.parametrize(("cluster", "store", "revision"), [s[1:] for s in STATES],
                         ids=[s[0] for s in STATES])
def test_a_site_it_does_not_write_is_the_full_clis(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        cluster: str, store: bool, revision: str | None) -> None:
    home = make_home(tmp_path, cluster, store=store)
    if revision is not None:
        conn = sqlite3.connect(home / "dethpc.db")
        conn.execute("UPDATE alembic_version SET version_num = ?", (revision,))
        conn.commit()
        conn.close()
    monkeypatch.setenv("DETHPC_HOME", str(home))
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(tmp_path / "c.yaml"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert fastsbatch.answer(["--no-daemon", "job.sh"]) is None
    assert capsys.readouterr() == ("", "")
    assert not (home / "runs").exists() and (home / "dethpc.db").exists() == store


def _run(tmp_path: Path, args: list[str], *, fast: bool) -> tuple[bytes, bytes, int, set[str]]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DETHPC_", "SLURM_", "XDG_"))}
    env.update({"DETHPC_HOME": str(tmp_path / "home"),
                "DETHPC_CLUSTER_CONFIG": str(tmp_path / "c.yaml"),
                "XDG_CACHE_HOME": str(tmp_path / "cache"), "COLUMNS": "100",
                "MODULES_OUT": str(tmp_path / "modules.json"),
                "DETHPC_FAST_SBATCH": "1" if fast else "0"})
    done = subprocess.run([sys.executable, "-c", DRIVER, *args], env=env, cwd=tmp_path,
                          capture_output=True, timeout=120, check=False)
    return (done.stdout, done.stderr, done.returncode,
            set(json.loads((tmp_path / "modules.json").read_text())))


@pytest.mark.parametrize("args", [["sbatch", "no-shebang.sh"],
                                  ["sbatch", "--no-daemon", "--array=0-x", "job.sh"],
                                  ["sbatch", "--config", "a=1", "job.sh"]],
                         ids=["not a batch script", "a bad array", "--config"])
def test_a_refusal_is_the_same_bytes_without_the_clis_imports(tmp_path: Path,
                                                              args: list[str]) -> None:
    """Refused before anything is recorded (no Slurm needed): the light path says what
    the typer command says, with its exit code, imports none of ``FORBIDDEN`` and, though
    the first is run without ``--no-daemon``, starts no daemon."""
    make_home(tmp_path)
    full = _run(tmp_path, args, fast=False)
    fast = _run(tmp_path, args, fast=True)
    assert fast[:3] == full[:3] and fast[2] != 0, (fast[:3], full[:3])
    assert not fast[3] & set(FORBIDDEN), fast[3] & set(FORBIDDEN)
    assert "typer" in full[3]                        # the full path did run
    assert not (tmp_path / "home" / "runs").exists() or not any(
        (tmp_path / "home" / "runs").iterdir())
    # refused before it was planned: no daemon was started for it (its log is its trace)
    assert not (tmp_path / "home" / "daemon.log").exists()


#: a supervisor that takes its lock and writes its pidfile, as the real one, and never
#: starts a daemon
FAKE_SUPERVISOR = """
import fcntl, os, sys, time
f = open(sys.argv[1], "a+")
fcntl.flock(f, fcntl.LOCK_EX)
with open(sys.argv[2], "w") as pidfile:
    pidfile.write(str(os.getpid()))
time.sleep(120)
"""


def test_a_plain_jobs_daemon_is_started_not_waited_for(
        home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``launch_daemon`` (``service.launch``): the job is recorded, so the command returns
    once the supervisor holds its lock, without waiting for the daemon's (``service.start``
    would wait here, up to 120 s, for a daemon that never takes it); a prestarted
    supervisor is adopted, not spawned again; a supervisor already there is asked to start
    the daemon now and nothing is said."""
    import signal

    from dethpc.control import service

    spawned: list[subprocess.Popen[bytes]] = []

    def spawn(extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        spawned.append(subprocess.Popen([sys.executable, "-c", FAKE_SUPERVISOR,
                                         str(service.supervisor_lock_path()),
                                         str(service.supervisor_pid_path())]))
        return spawned[-1]

    monkeypatch.setattr(service, "_spawn", spawn)
    said = "dethpc: started the daemon (supervisor pid {}) that tracks this job; log: {}\n"
    try:
        fastsbatch.launch_daemon()
        assert len(spawned) == 1 and spawned[0].poll() is None
        assert capsys.readouterr().err == said.format(spawned[0].pid, service.log_path())
        # from its return on, a view sees the daemon as starting
        assert service.running_pid() is None and service.starting_or_running()
        spawned[0].kill()
        spawned[0].wait()
        service.prestart()                       # as the light path does once planned
        assert len(spawned) == 2
        fastsbatch.launch_daemon()
        assert len(spawned) == 2 and service._Prestarted.proc is None   # adopted
        assert capsys.readouterr().err == said.format(spawned[1].pid, service.log_path())
        # that supervisor holds its lock (one waiting out a back-off): poked, nothing said
        fastsbatch.launch_daemon()
        assert len(spawned) == 2 and capsys.readouterr().err == ""
        assert spawned[1].wait(timeout=30) == -signal.SIGUSR1
    finally:
        for proc in spawned:
            proc.kill()
            proc.wait()
