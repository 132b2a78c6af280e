"""dethpc on PostgreSQL: the same CLI and daemon, with ``database_url`` pointing at a
real server instead of the SQLite file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from sqlalchemy import text

from dethpc.common.errors import StoreError
from dethpc.store import Store
from tests.local.conftest import TOY, cli, write_config


@pytest.fixture
def pg_home(tmp_path, monkeypatch, postgres_url):
    h = tmp_path / "home"
    h.mkdir()
    # a fresh schema per test: drop what an earlier test left
    store = Store(postgres_url)
    with store.engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    store.engine.dispose()
    cluster = {"backend": "local", "runs_root": str(h / "runs"), "local_max_concurrent": 4,
               "tick_min_s": 0.1, "tick_max_s": 0.5, "database_url": postgres_url}
    (h / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    monkeypatch.setenv("DETHPC_HOME", str(h))
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(h / "cluster.yaml"))
    yield h
    subprocess.run([sys.executable, "-m", "dethpc.surfaces.entry", "daemon", "stop"],
                   capture_output=True, timeout=60)


def test_asha_experiment_through_cli_and_daemon(pg_home, tmp_path, postgres_url):
    cfg = write_config(tmp_path / "c.yaml", searcher={
        "name": "adaptive_asha", "metric": "validation_loss", "max_trials": 8,
        "max_concurrent_trials": 4, "max_length": {"batches": 16}, "divisor": 2,
        "max_rungs": 3, "mode": "aggressive"})
    exp = json.loads(cli("submit", cfg, TOY, "--json").stdout)["id"]
    cli("experiment", "wait", exp, "--timeout", "180", timeout=200)
    d = json.loads(cli("experiment", "describe", exp, "--json").stdout)
    assert d["state"] == "COMPLETED" and len(d["trials"]) == 8
    assert d["best_trial"]["best_validation"] is not None
    # nothing went to a SQLite file: the rows are in PostgreSQL
    assert not (pg_home / "dethpc.db").exists()
    store = Store(postgres_url)
    with store.engine.connect() as conn:
        n = conn.execute(text("SELECT count(*) FROM trial WHERE experiment_id = :e"),
                         {"e": exp}).scalar()
    assert n == 8


def test_unreachable_server_is_a_clear_error(tmp_path):
    with pytest.raises(StoreError, match="cannot open database"):
        Store("postgresql+psycopg://dethpc@127.0.0.1:1/none")
