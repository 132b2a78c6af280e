"""Issue 15 item 4: resources run out. Real file systems and a real locked database:

- ``runs_root`` on a full file system (a 2 MB tmpfs the test mounts): ``dethpc submit``
  refuses with the errno's words, naming runs_root, exit 1, no traceback, nothing
  recorded and nothing left behind;
- the runs_root fills while an experiment waits for its first job: the daemon goes on
  (an event says why, once), and submits once there is room again;
- a checkpoint written onto a full file system (``dethpc report checkpoint --copy``)
  fails with a clear message and the previous checkpoint stays the one resumed from;
- the database locked by another process: the CLI waits (``DETHPC_DB_BUSY_TIMEOUT_S``)
  and then reports, exit 1, no traceback, no half-written experiment.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from sqlmodel import select

from dethpc.backends.local import LocalBackend
from dethpc.config import load_cluster_config, load_experiment_config
from dethpc.control.daemon import Daemon
from dethpc.control.experiments import create_experiment
from dethpc.store import Store
from dethpc.store.models import Event, Experiment, Job
from tests.local.conftest import TOY, cli, write_config

REPO = Path(__file__).resolve().parents[2]
root_only = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None,
                               reason="mounting a small tmpfs needs root")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(fs: Path) -> Path:
    """Fill ``fs`` to the last block; returns the filler (delete it to free the space)."""
    filler = fs / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    return filler


def site(home: Path, runs: Path) -> Path:
    cfg = home / "cluster.yaml"
    cfg.write_text(yaml.safe_dump({"backend": "local", "runs_root": str(runs),
                                   "local_max_concurrent": 2, "tick_min_s": 0.1,
                                   "tick_max_s": 0.5}))
    return cfg


@root_only
def test_submit_to_a_full_runs_root_is_refused_and_leaves_nothing(
        home: Path, tmp_path: Path, small_fs: Path) -> None:
    site(home, small_fs / "runs")
    (small_fs / "runs").mkdir()
    fill(small_fs)
    exp = write_config(tmp_path / "exp.yaml")
    proc = cli("submit", exp, TOY, "--no-daemon", check=False)
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stderr
    said = " ".join(proc.stderr.split())          # rich wraps long lines
    assert "No space left on device" in said and "nothing was recorded" in said, said
    assert list((small_fs / "runs").iterdir()) == []
    store = Store(f"sqlite:///{home / 'dethpc.db'}")
    with store.session() as s:
        assert list(s.exec(select(Experiment))) == []


@root_only
def test_daemon_goes_on_when_runs_root_fills_and_submits_once_there_is_room(
        home: Path, tmp_path: Path, small_fs: Path) -> None:
    cluster = load_cluster_config(site(home, small_fs / "runs"))
    store = Store(f"sqlite:///{home / 'dethpc.db'}")
    exp_id = create_experiment(store, cluster, load_experiment_config(
        write_config(tmp_path / "exp.yaml"), []), TOY, LocalBackend(tmp_path / "spool"))
    daemon = Daemon(store, cluster, LocalBackend(tmp_path / "spool", max_concurrent=2))
    filler = fill(small_fs)
    for _ in range(3):
        stats = daemon.tick()                      # no exception escapes: it goes on
        assert any("No space left on device" in e for e in stats.errors), stats.errors
    with store.session() as s:
        warnings = [e.message for e in s.exec(select(Event).where(
            Event.experiment_id == exp_id, Event.kind == "warning"))]
        assert len(warnings) == 1 and "the trials wait" in warnings[0], warnings
    filler.unlink()
    for _ in range(3):
        daemon.tick()
    with store.session() as s:
        refs = [j.ref for j in s.exec(select(Job).where(Job.experiment_id == exp_id)) if j.ref]
    assert refs, "nothing was submitted once there was room"


@root_only
def test_checkpoint_on_a_full_fs_keeps_the_previous_one(tmp_path: Path,
                                                        small_fs: Path) -> None:
    trial = tmp_path / "trial"
    trial.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "DETHPC_TRIAL_DIR": str(trial),
           "DETHPC_CHECKPOINT_DIR": str(small_fs / "ckpt"), "DETHPC_RUN_ID": "0"}
    first = tmp_path / "step-1"
    first.mkdir()
    (first / "w").write_bytes(b"1" * 1000)
    ok = subprocess.run([sys.executable, "-m", "dethpc.surfaces.entry", "report", "checkpoint",
                         str(first), "--step", "1", "--copy"], env=env, capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    big = tmp_path / "step-2"
    big.mkdir()
    (big / "w").write_bytes(b"2" * 4 * 1024 * 1024)           # more than the 2 MB fs
    bad = subprocess.run([sys.executable, "-m", "dethpc.surfaces.entry", "report", "checkpoint",
                          str(big), "--step", "2", "--copy"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr, bad.stderr
    assert "No space left" in bad.stderr, bad.stderr
    latest = subprocess.run([sys.executable, "-m", "dethpc.surfaces.entry", "latest-checkpoint"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert latest.returncode == 0 and latest.stdout.strip().endswith("step-1"), latest
    assert (Path(latest.stdout.strip()) / "w").read_bytes() == b"1" * 1000


def test_locked_database_waits_then_reports_without_a_traceback(
        home: Path, tmp_path: Path) -> None:
    site(home, tmp_path / "runs")
    db = home / "dethpc.db"
    Store(f"sqlite:///{db}")                            # the database, at the head
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    env = {**os.environ, "DETHPC_DB_BUSY_TIMEOUT_S": "1"}
    try:
        proc = cli("submit", write_config(tmp_path / "exp.yaml"), TOY, "--no-daemon",
                   check=False, env=env)
    finally:
        holder.execute("ROLLBACK")
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stderr, proc.stderr
    said = " ".join(proc.stderr.split())
    assert "database is locked" in said and "Traceback" not in said, said
    assert not [p for p in (tmp_path / "runs").glob("*") if p.name != ".incoming"]
    # held for a while by another process, then released: the CLI waits and succeeds
    hold = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "c.execute('BEGIN EXCLUSIVE'); print('held', flush=True); time.sleep(2); "
        "c.execute('ROLLBACK')"), str(db)], stdout=subprocess.PIPE, text=True)
    assert hold.stdout is not None and hold.stdout.readline().strip() == "held"
    proc = cli("submit", write_config(tmp_path / "exp.yaml"), TOY, "--no-daemon",
               check=False, env={**os.environ, "DETHPC_DB_BUSY_TIMEOUT_S": "30"})
    hold.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr
