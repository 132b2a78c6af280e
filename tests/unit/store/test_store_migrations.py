"""Store migrations on SQLite: a database of the previous release upgrades and keeps its rows,
the migrated schema is exactly the models', an up-to-date database is opened with one query,
a newer database is refused, concurrent openers migrate once, a failed migration leaves the
database as it was."""

from __future__ import annotations

import ast
import multiprocessing
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event
from sqlmodel import SQLModel

import dethpc.store.models  # noqa: F401  (the tables SQLModel.metadata must hold)
from dethpc.common.errors import StoreError
from dethpc.store import Store, migrations
from tests.fixtures.store.v1_rows import (
    V1_SQLITE,
    current_rows,
    expected_at_head,
    previous_release,
    raw_rows,
    write_v1,
)

HEAD = migrations.head_revision()


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture
def v1_db(tmp_path: Path) -> Path:
    """A copy of the committed database written by dethpc 3b2ae8d."""
    db = tmp_path / "v1.sqlite"
    shutil.copyfile(V1_SQLITE, db)
    return db


def _tables(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _revision(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")]


def _assert_upgrade_keeps_rows(db: Path) -> None:
    assert "schemainfo" in _tables(db) and "alembic_version" not in _tables(db)
    engine = create_engine(_url(db))
    before = raw_rows(engine)
    engine.dispose()
    assert all(before.values()), f"the v1 database lacks rows: {before}"

    store = Store(_url(db))
    assert store.migration is not None and store.migration.stamped_v1
    assert store.migration.head == HEAD
    assert _revision(db) == [HEAD]
    assert current_rows(store.engine) == expected_at_head(before)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    store.engine.dispose()


def test_database_of_the_previous_release_upgrades_and_keeps_every_row(v1_db):
    _assert_upgrade_keeps_rows(v1_db)
    # and the upgraded database is current: the next open does nothing
    assert Store(_url(v1_db)).migration is None


def test_database_written_now_by_the_previous_release_code_upgrades(tmp_path):
    code = previous_release(tmp_path / "v1-code")
    if code is None:
        pytest.skip("git or commit 3b2ae8d is not available; the committed v1 database "
                    "covers the upgrade")
    db = tmp_path / "fresh-v1.sqlite"
    write_v1(code, _url(db), mode="direct", timeout=300)
    _assert_upgrade_keeps_rows(db)


def _schema_diff(url: str) -> list:  # type: ignore[type-arg]
    engine = create_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    engine.dispose()
    return diff


def test_empty_database_migrates_to_exactly_the_schema_of_the_models(tmp_path):
    """The chain from base (PostgreSQL's way; SQLite's fresh home skips it, below)."""
    url = _url(tmp_path / "new.db")
    engine = create_engine(url)
    done = migrations.upgrade_to_head(engine, fresh_at_head=False)
    engine.dispose()
    assert done is not None and done.start is None and not done.created_at_head
    assert _revision(tmp_path / "new.db") == [HEAD]
    assert _schema_diff(url) == []


def _columns(db: Path) -> dict[str, set[tuple[object, ...]]]:
    """Every table's columns (name, type, not null, default, primary key) and indexes."""
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        out = {t: {tuple(r[1:]) for r in conn.execute(f"PRAGMA table_info('{t}')")}
               | {("fk", *r[2:5]) for r in conn.execute(f"PRAGMA foreign_key_list('{t}')")}
               for t in tables}
        out["indexes"] = {tuple(r) for r in conn.execute(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type='index'")}
    return out


def test_a_fresh_sqlite_database_is_created_at_head_without_alembic(tmp_path):
    """A new home's store: the models' tables and the head revision, no migration run,
    Alembic not imported; the same tables, columns, keys and indexes as the chain gives."""
    db = tmp_path / "fresh.db"
    probe = ("import sys; from dethpc.store import Store; s = Store(sys.argv[1]); "
             "m = s.migration; print(m.start, m.created_at_head, "
             "sorted(n for n in sys.modules if n.startswith('alembic')))")
    out = subprocess.run([sys.executable, "-c", probe, _url(db)], capture_output=True,
                         text=True, check=True, timeout=120).stdout.split()
    assert out == ["None", "True", "[]"]
    assert _revision(db) == [HEAD]
    assert _schema_diff(_url(db)) == []
    chained = tmp_path / "chained.db"
    engine = create_engine(_url(chained))
    migrations.upgrade_to_head(engine, fresh_at_head=False)
    engine.dispose()
    assert _columns(db) == _columns(chained)
    assert Store(_url(db)).migration is None  # at head: the one-query path from now on


def test_upgraded_v1_database_has_exactly_the_schema_of_the_models(v1_db):
    Store(_url(v1_db))
    assert _schema_diff(_url(v1_db)) == []


def test_schema_diff_sees_a_model_change_without_a_migration(tmp_path):
    """The compare test can fail: a column the revisions do not create is reported."""
    from sqlalchemy import Column, Integer, MetaData, Table

    url = _url(tmp_path / "new.db")
    Store(url)
    engine = create_engine(url)
    extra = MetaData()
    for table in SQLModel.metadata.sorted_tables:
        table.to_metadata(extra)
    Table("experiment", extra, Column("priority", Integer, nullable=False),
          extend_existing=True)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), extra)
    engine.dispose()
    assert [d[0] for d in diff] == ["add_column"] and diff[0][3].name == "priority"


def test_head_from_file_names_is_alembics_head_and_revisions_are_one_chain():
    script = ScriptDirectory.from_config(migrations.alembic_config())
    assert script.get_heads() == [HEAD]
    chain = list(reversed(list(script.walk_revisions())))
    assert chain[0].down_revision is None
    for older, newer in zip(chain, chain[1:], strict=False):
        assert newer.down_revision == older.revision
    for rev in chain:
        assert rev.path is not None
        assert Path(rev.path).name.startswith(f"{rev.revision}_"), (
            f"{rev.path}: file NNNN_slug.py must hold revision NNNN (the store reads the "
            "head from the file names)")


def test_revisions_import_neither_the_models_nor_sqlmodel():
    for path in sorted(migrations.VERSIONS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name.split(".")[0] in ("__future__", "alembic", "sqlalchemy"), (
                    f"{path.name} imports {name}: a revision must describe the schema with "
                    "plain SQLAlchemy types, never the live models")


def test_opening_a_current_database_is_one_query_and_does_not_load_alembic(tmp_path):
    url = _url(tmp_path / "state.db")
    assert Store(url).migration is not None
    statements: list[str] = []

    def count(_conn, _cursor, statement, *_args) -> None:  # type: ignore[no-untyped-def]
        statements.append(statement)

    from sqlalchemy.engine import Engine

    event.listen(Engine, "before_cursor_execute", count)
    try:
        again = Store(url)
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    assert again.migration is None
    assert statements == ["SELECT version_num FROM alembic_version"]
    probe = ("import sys; from dethpc.store import Store; s = Store(sys.argv[1]); "
             "print(s.migration, sorted(m for m in sys.modules if m.startswith('alembic')))")
    out = subprocess.run([sys.executable, "-c", probe, url], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    assert out == ["None", "[]"]


def test_database_of_a_newer_dethpc_is_refused_with_both_revisions(tmp_path):
    db = tmp_path / "state.db"
    Store(_url(db))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(StoreError) as err:
        Store(_url(db))
    msg = str(err.value)
    assert "9999" in msg and f"schema revision {HEAD}" in msg and "newer dethpc" in msg
    assert "DETHPC_HOME" in msg
    assert _revision(db) == ["9999"]     # left alone
    # the CLI says it in one message, without a traceback
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"backend": "local", "runs_root": str(tmp_path / "runs"),
                                       "database_url": _url(db)}))
    proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "experiment", "list"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DETHPC_HOME": str(tmp_path),
                               "DETHPC_CLUSTER_CONFIG": str(cluster)})
    assert proc.returncode != 0
    assert "9999" in proc.stderr + proc.stdout and "Traceback" not in proc.stderr


def test_pre_alembic_database_of_another_version_is_refused(v1_db):
    with sqlite3.connect(v1_db) as conn:
        conn.execute("UPDATE schemainfo SET version = 7")
    with pytest.raises(StoreError, match="pre-Alembic schema version 7"):
        Store(_url(v1_db))
    assert "alembic_version" not in _tables(v1_db)


def test_dethpc_tables_without_any_revision_are_refused(v1_db):
    with sqlite3.connect(v1_db) as conn:
        conn.execute("DROP TABLE schemainfo")
    with pytest.raises(StoreError, match="no schema revision"):
        Store(_url(v1_db))


def test_unreadable_database_is_a_clear_error(tmp_path):
    with pytest.raises(StoreError, match="cannot open database"):
        Store(_url(tmp_path))           # a directory, not a database file
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError, match="cannot .* database"):
        Store(_url(bad))


def _open(url: str, barrier, results) -> None:  # type: ignore[no-untyped-def]
    barrier.wait(timeout=120)
    try:
        m = Store(url).migration
        results.put(("ok", None if m is None else m.start))
    except BaseException as exc:  # noqa: BLE001  (reported to the parent)
        results.put(("error", repr(exc)))


def test_concurrent_openers_of_a_v1_database_all_succeed_and_migrate_once(v1_db):
    engine = create_engine(_url(v1_db))
    before = raw_rows(engine)
    engine.dispose()
    ctx = multiprocessing.get_context("spawn")
    n = 3
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_open, args=(_url(v1_db), barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert all(kind == "ok" for kind, _ in outcomes), outcomes
    migrated = [start for _, start in outcomes if start is not None]
    assert migrated == [migrations.V1_REVISION], outcomes
    assert _revision(v1_db) == [HEAD]
    store = Store(_url(v1_db))
    assert store.migration is None
    assert current_rows(store.engine) == expected_at_head(before)


def test_a_failing_migration_leaves_the_database_as_it_was(v1_db, tmp_path, monkeypatch):
    """SQLite runs the whole check + stamp + upgrade in one BEGIN IMMEDIATE transaction."""
    scripts = tmp_path / "migrations"
    shutil.copytree(migrations.HERE, scripts,
                    ignore=shutil.ignore_patterns("__pycache__", "__init__.py", "__main__.py"))
    bad = f"{int(HEAD) + 1:04d}"
    (scripts / "versions" / f"{bad}_boom.py").write_text(
        f"import sqlalchemy as sa\nfrom alembic import op\n"
        f"revision = {bad!r}\ndown_revision = {HEAD!r}\n"
        "def upgrade():\n"
        "    op.create_table('half_done', sa.Column('id', sa.Integer, primary_key=True))\n"
        "    op.execute('DELETE FROM metric')\n"
        "    op.execute('INSERT INTO no_such_table VALUES (1)')\n")
    monkeypatch.setattr(migrations, "HERE", scripts)
    monkeypatch.setattr(migrations, "VERSIONS", scripts / "versions")
    migrations.head_revision.cache_clear()
    try:
        before = sqlite3.connect(v1_db).execute("SELECT count(*) FROM metric").fetchone()
        with pytest.raises(StoreError, match="rolled back"):
            Store(_url(v1_db))
    finally:
        migrations.head_revision.cache_clear()
    assert "half_done" not in _tables(v1_db) and "alembic_version" not in _tables(v1_db)
    assert sqlite3.connect(v1_db).execute("SELECT count(*) FROM metric").fetchone() == before
    with sqlite3.connect(v1_db) as conn:
        assert conn.execute("SELECT version FROM schemainfo").fetchall() == [(1,)]
