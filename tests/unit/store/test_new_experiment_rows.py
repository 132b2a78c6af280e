"""``dethpc submit``'s store path without SQLAlchemy (``dethpc.store.new_experiment``):
the same rows as the models write, used only for an SQLite file at head, and a submit
that never imports SQLAlchemy (issue 47 item 1). Real SQLite."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dethpc.backends.local import LocalBackend
from dethpc.config import load_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control.experiments import create_experiment
from dethpc.store import Store
from dethpc.store.migrations import head_revision as alembic_head
from dethpc.store.new_experiment import HEAD_REVISION, SqliteAtHead

REPO = Path(__file__).resolve().parents[3]
DIGITS = REPO / "examples" / "digits"
#: columns a second experiment differs in whatever wrote it
VARYING = {"id", "run_dir", "created_at", "time", "experiment_id"}


def rows(db: Path, exp_id: int) -> dict[str, list[dict[str, object]]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        out = {}
        queries = {
            "experiment": "SELECT * FROM experiment WHERE id = ?",
            "searcherstate": "SELECT * FROM searcherstate WHERE experiment_id = ?",
            # JSON 'null' (the models' None) is not SQL NULL: the type tells them apart
            "event": "SELECT *, typeof(data) AS data_type FROM event WHERE experiment_id = ?",
        }
        for table, sql in queries.items():
            got = conn.execute(sql, (exp_id,)).fetchall()
            out[table] = [{k: r[k] for k in r.keys() if k not in VARYING} for r in got]
        return out
    finally:
        conn.close()


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Store, ClusterConfig, Path]:
    db = tmp_path / "dethpc.db"
    store = Store(f"sqlite:///{db}")   # created at head
    cluster = ClusterConfig(backend="local", runs_root=tmp_path / "runs",
                            pools={"default": ResourcePool(name="default")})
    return store, cluster, db


def test_head_revision_is_the_migrations_head() -> None:
    """The constant (``dethpc.store.revision``, the read path's too) is the newest script."""
    assert HEAD_REVISION == alembic_head()


def test_same_rows_as_the_models(setup: tuple[Store, ClusterConfig, Path],
                                 tmp_path: Path) -> None:
    store, cluster, db = setup
    cfg = load_experiment_config(DIGITS / "adaptive.yaml", [])
    backend = LocalBackend(tmp_path / "spool")
    by_orm = create_experiment(store, cluster, cfg, DIGITS, backend)
    quick = SqliteAtHead.open(f"sqlite:///{db}")
    assert quick is not None
    by_sqlite3 = create_experiment(quick, cluster, cfg, DIGITS, backend)
    assert by_sqlite3 == by_orm + 1
    assert rows(db, by_sqlite3) == rows(db, by_orm)
    # the run directory is the experiment's own, filled, and read back by the models
    from dethpc.control.experiments import get_experiment

    exp = get_experiment(store, by_sqlite3)
    assert exp.run_dir == str(tmp_path / "runs" / str(by_sqlite3))
    assert (Path(exp.run_dir) / "context" / "model_def.py").is_file()
    assert exp.labels == list(cfg.labels)


def test_a_failed_insert_leaves_no_row_and_no_directory(
        setup: tuple[Store, ClusterConfig, Path], tmp_path: Path) -> None:
    store, cluster, db = setup
    cfg = load_experiment_config(DIGITS / "adaptive.yaml", [])
    (tmp_path / "runs" / "1").mkdir(parents=True)   # the id's directory is taken
    quick = SqliteAtHead.open(f"sqlite:///{db}")
    assert quick is not None
    with pytest.raises(Exception, match="already exists"):
        create_experiment(quick, cluster, cfg, DIGITS, LocalBackend(tmp_path / "spool"))
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM experiment").fetchone() == (0,)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["1"]


def test_only_an_sqlite_file_at_head(tmp_path: Path) -> None:
    db = tmp_path / "dethpc.db"
    assert SqliteAtHead.open(f"sqlite:///{db}") is None                 # no file yet
    assert SqliteAtHead.open("postgresql+psycopg://u@h/db") is None
    Store(f"sqlite:///{db}")
    assert SqliteAtHead.open(f"sqlite:///{db}") == SqliteAtHead(db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE alembic_version SET version_num = '0001'")   # an older schema
    conn.commit()
    conn.close()
    assert SqliteAtHead.open(f"sqlite:///{db}") is None                 # the Store upgrades


def test_submit_imports_no_sqlalchemy(tmp_path: Path) -> None:
    """The whole command, on a store at head: recorded, and SQLAlchemy never imported."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "cluster.yaml").write_text(f"backend: local\nruns_root: {home}/runs\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DETHPC_", "SLURM_"))}
    env.update(DETHPC_HOME=str(home), DETHPC_CLUSTER_CONFIG=str(home / "cluster.yaml"),
               DETHPC_DETECT="0")
    Store(f"sqlite:///{home / 'dethpc.db'}")   # the home's store, at head
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dethpc.surfaces.cli.main", "submit",
         str(DIGITS / "adaptive.yaml"), str(DIGITS), "--no-daemon", "--json"],
        env=env, capture_output=True, text=True, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().replace(" ", "").replace("\n", "") == '{"id":1}'
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert not {m for m in imported if m.split(".")[0] in ("sqlalchemy", "sqlmodel")}
    conn = sqlite3.connect(home / "dethpc.db")
    assert conn.execute("SELECT name, state FROM experiment").fetchall() == [
        ("digits-asha", "ACTIVE")]
