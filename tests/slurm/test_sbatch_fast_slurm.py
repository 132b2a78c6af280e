"""Issue 47 item 1 on the dev cluster: ``dethpc sbatch`` on a SQLite store at head takes
its light path (``dethpc.surfaces.cli.fastsbatch``): it submits through the real sbatch,
prints sbatch's line, records the job with ``sqlite3`` alone, and never imports
SQLAlchemy, sqlmodel, pydantic, Alembic, typer, click or torch; the daemon tracks the job
to its end. An array job asks Slurm's ``MaxArraySize`` (its task ids are checked before
anything is recorded); a plain job does not ask. Without ``--no-daemon`` the user's
daemon is started (its start overlapping the submission, ``service.prestart``), not waited
for (``service.launch``), and the command's process never imports the daemon's modules.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.store.models import Batch, BatchState, Job
from tests.slurm.fixtures.sbatch_kit import (
    env_for,
    experiment_of_job,
    job_field,
    sbatch_home,
    tick_until,
)

#: what the light path must never import
#: (and Jinja2: the wrapper is written by ``dethpc.jobs.wrapper_text``)
FORBIDDEN = {"sqlalchemy", "sqlmodel", "pydantic", "alembic", "typer", "click", "torch",
             "jinja2"}
#: the console script's main in this process, which says at exit what it imported and
#: which Slurm commands it ran (every ``subprocess.Popen`` argv's first word)
DRIVER = """
import atexit, json, os, subprocess, sys
ran = []
_init = subprocess.Popen.__init__
def _popen(self, args, *a, **k):
    ran.append(os.path.basename(str(args[0] if isinstance(args, (list, tuple)) else args)))
    _init(self, args, *a, **k)
subprocess.Popen.__init__ = _popen
def _said():
    with open(os.environ["MODULES_OUT"], "w") as f:
        json.dump({"modules": sorted(sys.modules), "ran": ran}, f)
atexit.register(_said)
from dethpc.surfaces.entry import main
main(sys.argv[1:])
"""
SCRIPT = "#!/bin/bash\n#SBATCH --partition=debug\n#SBATCH --time=2\n#SBATCH --output=out-%j.txt\n"


@pytest.fixture
def home(tmp_path: Path, slurm_cluster: Any) -> Iterator[tuple[Path, Store, Daemon]]:
    with sbatch_home(tmp_path) as made:
        yield made


def run(home: Path, cwd: Path, *args: str, **extra: str) -> tuple[subprocess.CompletedProcess[str],
                                                                 set[str], list[str]]:
    out = cwd / "modules.json"
    done = subprocess.run([sys.executable, "-c", DRIVER, "sbatch", *args], cwd=cwd,
                          env=env_for(home, MODULES_OUT=str(out), **extra),
                          capture_output=True, text=True, timeout=180)
    said = json.loads(out.read_text())
    return done, set(said["modules"]), said["ran"]


def test_a_job_and_an_array_are_recorded_without_the_orm_and_tracked(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    root, store, daemon = home
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(SCRIPT + "echo one\n")
    (work / "array.sh").write_text(SCRIPT + "#SBATCH --array=1-3%2\necho $SLURM_ARRAY_TASK_ID\n")
    for script, tasks, asks in (("job.sh", [None], []), ("array.sh", [1, 2, 3], ["scontrol"])):
        done, modules, ran = run(root, work, "--no-daemon", script)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Submitted batch job ") and done.stderr == ""
        jid = done.stdout.split()[-1]
        assert not {m.split(".")[0] for m in modules} & FORBIDDEN, modules & FORBIDDEN
        assert "dethpc.surfaces.cli.fastsbatch" in modules   # the light path answered
        assert ran == [*asks, "sbatch"], ran        # MaxArraySize for an array only
        exp_id = experiment_of_job(store, jid)
        with store.session() as s:
            (batch,) = s.exec(select(Batch).where(Batch.experiment_id == exp_id))
            refs = sorted(j.ref or "" for j in s.exec(select(Job).where(
                Job.experiment_id == exp_id)))
        assert batch.state == BatchState.SUBMITTED and batch.array_job_id == jid
        assert refs == sorted(jid if t is None else f"{jid}_{t}" for t in tasks)
        assert job_field(f"{jid}_1" if tasks[0] else jid, "JobName") == script
        d = tick_until(store, daemon, exp_id, timeout=180)
        assert d["state"] == "COMPLETED", d
        assert [t["state"] for t in d["trials"]] == ["COMPLETED"] * len(tasks)


def test_the_orm_path_prints_the_same_and_records_the_same(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    """``DETHPC_FAST_SBATCH=0``: the typer command over the ORM, as before; its line and
    its rows as the light path's (tests/unit/store/test_sbatch_rows.py compares them
    column by column)."""
    root, store, _ = home
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(SCRIPT + "true\n")
    lines, kinds = [], []
    for fast in ("1", "0"):
        done, modules, _ = run(root, work, "--no-daemon", "--parsable", "job.sh",
                               DETHPC_FAST_SBATCH=fast)
        assert done.returncode == 0 and done.stdout.strip().isdigit(), done.stderr
        lines.append(done.stdout.replace(done.stdout.strip(), "N"))
        kinds.append("sqlalchemy" in modules)
        exp_id = experiment_of_job(store, done.stdout.strip())
        with store.session() as s:
            (batch,) = s.exec(select(Batch).where(Batch.experiment_id == exp_id))
        assert batch.state == BatchState.SUBMITTED
    assert lines == ["N\n", "N\n"] and kinds == [False, True]


def test_the_daemon_is_started_without_its_imports_here(
        home: tuple[Path, Store, Daemon], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Started, not waited for (``service.launch``): the command names the daemon's
    supervisor and returns; the daemon takes its lock after, and tracks the job."""
    root, _, _ = home
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(SCRIPT + "true\n")
    done, modules, ran = run(root, work, "job.sh")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Submitted batch job ")
    said = re.fullmatch(r"dethpc: started the daemon \(supervisor pid (\d+)\) that tracks "
                        r"this job; log: .*\n", done.stderr)
    assert said is not None, done.stderr
    assert not {m for m in modules if m.startswith(("dethpc.control.daemon", "sqlalchemy"))}
    monkeypatch.setenv("DETHPC_HOME", str(root))
    from dethpc.control import service

    assert service.supervisor_pid() == int(said[1])   # still there: adopted, not stopped
    deadline = time.monotonic() + 120       # a loaded 2-core host: imports took > 10 s
    while service.running_pid() is None and time.monotonic() < deadline:
        assert service.supervisor_pid() == int(said[1]), (root / "daemon.log").read_text()
        time.sleep(0.1)
    pid = service.running_pid()
    assert pid is not None and pid > 0, (root / "daemon.log").read_text()
    status = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "daemon",
                             "status"], env=env_for(root), capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 0, (status.stdout, status.stderr)
    assert status.stdout.startswith(f"daemon running (pid {pid})"), status.stdout
    # a second submission finds it running: no start, nothing said
    again, _, _ = run(root, work, "job.sh")
    assert again.returncode == 0 and again.stderr == "", again.stderr
