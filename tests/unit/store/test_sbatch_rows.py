"""``dethpc sbatch``'s rows without SQLAlchemy (``dethpc.store.sbatch_rows``): the record,
the confirmation and the removal write, column by column, what the models write
(``plain.record``/``unrecord`` and ``SbatchLedger.confirm`` over a ``Store``), for each
kind of job (issue 47 item 1). Real SQLite, one store holding both paths' experiments."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control.submitters import MARKER, SbatchLedger
from dethpc.store import Store
from dethpc.store.new_experiment import SqliteAtHead
from dethpc.surfaces.sbatchwrap import plain
from dethpc.surfaces.sbatchwrap.search_cli import parse_command

#: columns that differ between two experiments whatever wrote them (ids, times, places)
VARYING = {"id", "experiment_id", "trial_id", "batch_id", "run_dir", "created_at", "time",
           "submitted_at"}
TABLES = {
    "experiment": "SELECT * FROM experiment WHERE id = ?",
    "searcherstate": "SELECT * FROM searcherstate WHERE experiment_id = ?",
    "batch": "SELECT * FROM batch WHERE experiment_id = ? ORDER BY id",
    "trial": "SELECT * FROM trial WHERE experiment_id = ? ORDER BY id",
    "job": "SELECT * FROM job WHERE experiment_id = ? ORDER BY id",
    # JSON 'null' (the models' None) is not SQL NULL: the type tells them apart
    "event": "SELECT *, typeof(data) AS data_type FROM event WHERE experiment_id = ? "
             "ORDER BY id",
}
CLUSTER_POOLS = {"debug": ResourcePool(name="debug", partition="debug", signal="USR1",
                                       signal_grace_s=30),
                 "low": ResourcePool(name="low", partition="low")}

#: (id, command line, script, the job's refs as Slurm gives them, adopted)
CASES = [
    ("one job", ["job.sh"], "#!/bin/bash\n#SBATCH -t 5\necho hi\n", ["4711"], False),
    ("array, throttled, another pool", ["-p", "low", "job.sh", "a b"],
     "#!/bin/bash\n#SBATCH --array=0-4:2%1\necho $1\n", ["4712_0", "4712_2", "4712_4"], False),
    ("watched, its own name", ["--max-idle", "600", "--job-name=train", "job.sh"],
     "#!/bin/sh\necho hi\n", ["4713"], False),
    ("a name YAML quotes", ["--job-name=é: yes", "job.sh"], "#!/bin/bash\necho\n",
     ["4714"], False),
    ("adopted array", ["--array=3,5", "job.sh"], "#!/bin/bash\necho\n", ["4715_3", "4715_5"],
     True),
]


def rows(db: Path, exp_id: int) -> dict[str, list[dict[str, object]]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return {table: [{k: r[k] for k in r.keys() if k not in VARYING}
                        for r in conn.execute(sql, (exp_id,)).fetchall()]
                for table, sql in TABLES.items()}
    finally:
        conn.close()


@pytest.fixture
def site(tmp_path: Path) -> tuple[Store, SqliteAtHead, ClusterConfig, Path]:
    db = tmp_path / "dethpc.db"
    store = Store(f"sqlite:///{db}")   # created at head
    quick = SqliteAtHead.open(f"sqlite:///{db}")
    assert quick is not None
    cluster = ClusterConfig(backend="slurm", runs_root=tmp_path / "runs", pools=CLUSTER_POOLS,
                            default_pool="debug")
    (tmp_path / "runs").mkdir()   # as the submitter's lock makes it (``submitting``)
    return store, quick, cluster, db


def recorded(store: Store | SqliteAtHead, cluster: ClusterConfig, job: plain.PlainJob,
             refs: list[str], adopted: bool) -> plain.Recorded:
    rec = plain.record(store, cluster, job, token="t0", owner="someone", python=sys.executable)
    SbatchLedger(store, exp_id=rec.experiment_id, batch_id=rec.batch_id,
                 batch_name=MARKER + "t0", size=len(rec.trials),
                 job_name=job.name).confirm(refs, adopted=adopted)
    return rec


@pytest.mark.parametrize(("argv", "script", "refs", "adopted"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_same_rows_as_the_models(site: tuple[Store, SqliteAtHead, ClusterConfig, Path],
                                 tmp_path: Path, argv: list[str], script: str,
                                 refs: list[str], adopted: bool) -> None:
    store, quick, cluster, db = site
    (tmp_path / "job.sh").write_text(script)
    job = plain.plan(parse_command(argv), cluster, cwd=tmp_path, environ={}, stdin_text=None)
    by_orm = recorded(store, cluster, job, refs, adopted)
    by_sqlite3 = recorded(quick, cluster, job, refs, adopted)
    assert by_sqlite3.experiment_id == by_orm.experiment_id + 1
    assert [i for i, _ in by_sqlite3.trials] == [i for i, _ in by_orm.trials] == list(
        job.indices)
    want, got = rows(db, by_orm.experiment_id), rows(db, by_sqlite3.experiment_id)
    assert got == want
    assert len(got["trial"]) == len(got["job"]) == len(refs) and len(got["event"]) == 2
    # the run directory is the experiment's own, as the models store it
    conn = sqlite3.connect(db)
    ((run_dir,),) = conn.execute("SELECT run_dir FROM experiment WHERE id = ?",
                                 (by_sqlite3.experiment_id,)).fetchall()
    assert run_dir == str(by_sqlite3.paths.root) == str(tmp_path / "runs" /
                                                       str(by_sqlite3.experiment_id))
    assert plain.wrapper_path(by_sqlite3.paths, job).is_file()


def test_removal_leaves_nothing_of_either_path(
        site: tuple[Store, SqliteAtHead, ClusterConfig, Path], tmp_path: Path) -> None:
    """What ``unrecord`` leaves when sbatch refused: no row, no run directory, and the
    other experiments untouched."""
    store, quick, cluster, db = site
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH --array=0-2\necho\n")
    job = plain.plan(parse_command(["job.sh"]), cluster, cwd=tmp_path, environ={},
                     stdin_text=None)
    kept = recorded(quick, cluster, job, ["9_0", "9_1", "9_2"], False)
    for store_ in (store, quick):
        rec = plain.record(store_, cluster, job, token="t1", owner="me", python=sys.executable)
        assert rec.paths.root.is_dir() and any(rows(db, rec.experiment_id).values())
        plain.unrecord(store_, rec)
        assert not any(rows(db, rec.experiment_id).values())
        assert not rec.paths.root.exists()
    assert len(rows(db, kept.experiment_id)["job"]) == 3


def test_a_taken_run_directory_leaves_no_row(
        site: tuple[Store, SqliteAtHead, ClusterConfig, Path], tmp_path: Path) -> None:
    store, quick, cluster, db = site
    (tmp_path / "job.sh").write_text("#!/bin/bash\necho\n")
    (tmp_path / "runs" / "1").mkdir()     # the next id's directory exists
    job = plain.plan(parse_command(["job.sh"]), cluster, cwd=tmp_path, environ={},
                     stdin_text=None)
    with pytest.raises(Exception, match="already exists"):
        plain.record(quick, cluster, job, token="t2", owner="me", python=sys.executable)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM experiment").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM batch").fetchone() == (0,)
