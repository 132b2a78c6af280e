"""Users of one shared PostgreSQL database (issue 15 item 5): each connects as their own
role, created by ``dethpc admin db add-user``, and the database itself (row-level
security, migration 0006) keeps them apart. Every test tries to break a rule as the
other user: bob against alice's rows, directly in SQL and through the CLI; carol, an
admin, sees everyone's rows but her daemon acts on hers only.

The Unix users are simulated (``USER``/``LOGNAME``/``HOME`` per CLI call; the tests run
as one Unix user): the database roles, their passwords (SCRAM on 127.0.0.1) and the
policies are real. Unix-level isolation (homes, run directories) is
tests/slurm/test_isolation_slurm.py. Wall time about 10 s.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlmodel import Session, select

from dethpc.common.errors import StoreError
from dethpc.store import Store, migrations
from dethpc.store.access import DatabaseRole, Scope
from dethpc.store.models import (
    Batch,
    Checkpoint,
    DaemonLease,
    Event,
    Experiment,
    IngestOffset,
    Job,
    Metric,
    SearcherState,
    Task,
    TaskKind,
    Trial,
)

USERS = ("alice", "bob", "carol")
#: the database's owner: not a superuser, CREATEROLE (docs/admin.md's setup)
OWNER = "dethpc_owner"
CONFIG = ("name: x\nentrypoint: python3 train.py\nsearcher: {name: single, metric: "
          "validation_loss, max_length: {batches: 10}}\n")
TABLES = ("experiment", "searcherstate", "trial", "batch", "job", "checkpoint", "metric",
          "event", "ingestoffset", "daemonlease", "task")


@dataclass
class World:
    #: the server's superuser (trusted): sees every row whatever the policies
    admin_url: str
    #: the schema owner's URL (SCRAM password), who migrates and adds users
    owner_url: str
    root: Path
    cluster: Path
    homes: dict[str, Path] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    add_user_output: str = ""
    ids: dict[str, int] = field(default_factory=dict)

    def env(self, user: str, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("DETHPC_HOME", "DETHPC_DATABASE_URL_FILE", "DETHPC_FAULT_POINT")}
        env.update(HOME=str(self.homes[user]), USER=user, LOGNAME=user,
                   DETHPC_CLUSTER_CONFIG=str(self.cluster), **extra)
        return env

    def engine(self, user: str) -> Engine:
        return create_engine(self.urls[user])


def _drop_roles(engine: Engine) -> None:
    """The test's roles, and the group roles (migration 0006 creates them again)."""
    with engine.begin() as conn:
        for role in (*USERS, OWNER, "dethpc_admin", "dethpc_users"):
            if conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"),
                            {"r": role}).first():
                conn.execute(text(f'DROP OWNED BY "{role}"'))
                conn.execute(text(f'DROP ROLE "{role}"'))


def _cli(world: World, user: str, *args: object, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dethpc.surfaces.cli.main", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=world.env(user, **env))


def _all(procs: dict[str, subprocess.Popen[str]]) -> dict[str, tuple[int, str, str]]:
    """Run CLI calls side by side (the tier's wall time), then collect them."""
    out = {}
    for key, p in procs.items():
        stdout, stderr = p.communicate(timeout=120)
        out[key] = (p.returncode, stdout, stderr)
    return out


def _seed(store: Store, owner: str, run_dir: Path) -> dict[str, int]:
    """One experiment of ``owner`` with a row in every per-experiment table, written as
    ``owner``'s own role."""
    with store.session() as s:
        exp = Experiment(name=f"{owner}-exp", config_yaml=CONFIG, run_dir=str(run_dir),
                         owner=owner)
        s.add(exp)
        s.flush()
        assert exp.id is not None
        trial = Trial(experiment_id=exp.id, request_id=1, hparams={"secret_lr": 0.123})
        batch = Batch(experiment_id=exp.id, name=f"{owner}-batch")
        s.add_all([trial, batch, SearcherState(experiment_id=exp.id)])
        s.flush()
        assert trial.id is not None and batch.id is not None
        s.add_all([Job(experiment_id=exp.id, trial_id=trial.id, batch_id=batch.id, ref="1_0"),
                   Checkpoint(uuid=f"{owner}-ck", experiment_id=exp.id, trial_id=trial.id,
                              path=str(run_dir / "ck")),
                   Metric(trial_id=trial.id, kind="validation", steps=1,
                          metrics={"validation_loss": 1.0}),
                   Event(experiment_id=exp.id, trial_id=trial.id, kind="created"),
                   IngestOffset(trial_id=trial.id, file="metrics.jsonl", offset=10),
                   DaemonLease(owner=owner, holder="login:1:abc", expires_at=1.0),
                   Task(kind=TaskKind.TENSORBOARD, owner=owner, experiment_ids=[exp.id])])
        return {"experiment": exp.id, "trial": trial.id}


def _snapshot(engine: Engine) -> dict[str, list[Any]]:
    with engine.connect() as conn:
        return {t: sorted(map(tuple, conn.execute(text(f"SELECT * FROM {t}")).all()),
                          key=repr) for t in TABLES}


@pytest.fixture(scope="module")
def world(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    admin = create_engine(postgres_url)
    with admin.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
    _drop_roles(admin)
    secret = secrets.token_urlsafe(16)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE ROLE {OWNER} LOGIN CREATEROLE PASSWORD '{secret}'"))
        conn.execute(text(f"CREATE SCHEMA public AUTHORIZATION {OWNER}"))
    owner_url = make_url(postgres_url).set(username=OWNER, password=secret)
    owner_url_text = owner_url.render_as_string(hide_password=False)
    Store(owner_url_text).engine.dispose()      # the schema owner migrates, users never
    root = tmp_path_factory.mktemp("shared")
    (root / "runs").mkdir()
    cluster = root / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "backend": "local", "runs_root": str(root / "runs"), "tick_min_s": 0.1,
        "tick_max_s": 0.5, "database_url_file": "~/.dethpc/database_url"}))
    w = World(admin_url=postgres_url, owner_url=owner_url_text, root=root, cluster=cluster)
    for user in ("root", *USERS):
        home = root / "home" / user
        (home / ".dethpc").mkdir(parents=True, mode=0o700)
        w.homes[user] = home
    # the schema owner's own credentials
    admin_file = w.homes["root"] / ".dethpc" / "database_url"
    admin_file.write_text(owner_url_text + "\n")
    admin_file.chmod(0o600)
    added = _all({u: _cli(w, "root", "admin", "db", "add-user", u, *(["--admin"] if u ==
                                                                     "carol" else []),
                          "--credentials-file", w.homes[u] / ".dethpc" / "database_url")
                  for u in USERS})
    for user, (rc, stdout, stderr) in added.items():
        assert rc == 0, (user, stdout, stderr)
        w.add_user_output += stdout + stderr
        w.urls[user] = (w.homes[user] / ".dethpc" / "database_url").read_text().strip()
    for user in ("alice", "bob"):
        store = Store(w.urls[user])
        ids = _seed(store, user, root / "runs" / user)
        store.engine.dispose()
        w.ids.update({f"{user}_{k}": v for k, v in ids.items()})
    yield w
    with admin.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    _drop_roles(admin)
    admin.dispose()


def test_add_user_writes_credentials_only_the_user_reads_and_never_prints_them(world):
    for user in USERS:
        path = world.homes[user] / ".dethpc" / "database_url"
        assert path.stat().st_mode & 0o777 == 0o600
        url = make_url(world.urls[user])
        assert url.username == user and url.password and len(url.password) >= 32
        assert url.password not in world.add_user_output
        # the password is the role's: it logs in, a wrong one does not
        with create_engine(url).connect() as conn:
            assert conn.execute(text("SELECT current_user")).scalar() == user
        with pytest.raises(OperationalError, match="password authentication failed"), \
                create_engine(url.set(password="not-" + url.password)).connect():
            pass
    # the server holds a SCRAM verifier, never the password itself
    with create_engine(world.admin_url).connect() as conn:
        stored = str(conn.execute(text("SELECT rolpassword FROM pg_authid WHERE rolname = "
                                       "'alice'")).scalar())
    assert stored.startswith("SCRAM-SHA-256$")
    assert str(make_url(world.urls["alice"]).password) not in stored


def test_every_dethpc_table_is_row_level_secured_and_forced(world):
    with create_engine(world.admin_url).connect() as conn:
        rows = conn.execute(text(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
            "(SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r'")).all()
    secured = {name: (rls, force, policies) for name, rls, force, policies in rows}
    assert set(secured) == {*TABLES, "alembic_version"}
    assert {t: secured[t] for t in TABLES} == {t: (True, True, 1) for t in TABLES}


def test_bob_reads_none_of_alices_rows_and_changes_none(world):
    before = _snapshot(create_engine(world.admin_url))
    alice_exp, alice_trial = world.ids["alice_experiment"], world.ids["alice_trial"]
    bob = world.engine("bob")
    with bob.begin() as conn:
        for table in TABLES:
            rows = conn.execute(text(f"SELECT * FROM {table}")).mappings().all()
            owners = {r.get("owner") for r in rows} - {None}
            exps = {r.get("experiment_id") for r in rows} - {None}
            assert owners <= {"bob"} and alice_exp not in exps, (table, rows)
            assert rows, f"bob sees none of his own {table} rows: the test proves nothing"
        assert conn.execute(text("SELECT * FROM trial WHERE id = :t"),
                            {"t": alice_trial}).all() == []
        changed = [
            conn.execute(text("UPDATE experiment SET state = 'CANCELED' WHERE id = :e"),
                         {"e": alice_exp}).rowcount,
            conn.execute(text("UPDATE trial SET hparams = '{}' WHERE id = :t"),
                         {"t": alice_trial}).rowcount,
            conn.execute(text("UPDATE daemonlease SET holder = 'bob:1:x' "
                              "WHERE owner = 'alice'")).rowcount,
            conn.execute(text("DELETE FROM event WHERE experiment_id = :e"),
                         {"e": alice_exp}).rowcount,
            conn.execute(text("DELETE FROM checkpoint WHERE experiment_id = :e"),
                         {"e": alice_exp}).rowcount,
            conn.execute(text("DELETE FROM metric WHERE trial_id = :t"),
                         {"t": alice_trial}).rowcount,
            conn.execute(text("DELETE FROM daemonlease WHERE owner = 'alice'")).rowcount,
        ]
    assert changed == [0] * len(changed)
    assert _snapshot(create_engine(world.admin_url)) == before


@pytest.mark.parametrize("statement", [
    "INSERT INTO experiment (name, description, labels, state, config_yaml, run_dir, owner, "
    "backend, kind, progress, created_at, message) VALUES ('forged', '', '[]', 'ACTIVE', "
    "'x', '/tmp/x', 'alice', 'local', 'managed', 0, 0, '')",
    "INSERT INTO event (experiment_id, kind, message, time) VALUES (:e, 'forged', '', 0)",
    "INSERT INTO checkpoint (uuid, experiment_id, trial_id, steps_completed, path, meta, "
    "state, created_at) VALUES ('forged', :e, :t, 0, '', '{}', 'COMPLETED', 0)",
    "INSERT INTO metric (trial_id, kind, steps, metrics, time) "
    "VALUES (:t, 'validation', 9, '{}', 0)",
    "INSERT INTO daemonlease (owner, holder, acquired_at, expires_at) "
    "VALUES ('alice2', 'bob:1:x', 0, 1e12)",
    "INSERT INTO task (kind, owner, state, pid, job_ref, host, endpoint, work_dir, "
    "idle_timeout_s, experiment_ids, message, created_at) VALUES ('tensorboard', 'alice', "
    "'running', 0, '', '', '', '', 0, '[]', '', 0)",
    "UPDATE experiment SET owner = 'alice' WHERE id = :b",
    "UPDATE trial SET experiment_id = :e WHERE experiment_id = :b",
], ids=["experiment-owned-by-alice", "event-in-alices-experiment",
        "checkpoint-of-alices-trial", "metric-of-alices-trial", "lease-of-another-owner",
        "task-owned-by-alice",
        "own-experiment-given-to-alice", "own-trial-moved-into-alices-experiment"])
def test_bob_cannot_write_a_row_that_is_alices(world, statement):
    params = {"e": world.ids["alice_experiment"], "t": world.ids["alice_trial"],
              "b": world.ids["bob_experiment"]}
    with pytest.raises(DBAPIError) as err, world.engine("bob").begin() as conn:
        conn.execute(text(statement), {k: v for k, v in params.items()
                                       if f":{k}" in statement})
    assert err.value.orig.sqlstate == "42501", err.value    # type: ignore[union-attr]
    assert "row-level security" in str(err.value.orig)


def test_bob_through_the_cli_cannot_see_or_touch_alices_experiment(world):
    alice_exp, alice_trial = world.ids["alice_experiment"], world.ids["alice_trial"]
    before = _snapshot(create_engine(world.admin_url))
    out = _all({
        "alice-trials": _cli(world, "alice", "experiment", "list-trials", alice_exp, "--json"),
        "describe": _cli(world, "bob", "experiment", "describe", alice_exp),
        "trials": _cli(world, "bob", "experiment", "list-trials", alice_exp, "--json"),
        "events": _cli(world, "bob", "experiment", "events", alice_exp, "--json"),
        "trial": _cli(world, "bob", "trial", "describe", alice_trial),
        "cancel": _cli(world, "bob", "experiment", "cancel", alice_exp),
        "kill": _cli(world, "bob", "experiment", "kill", alice_exp),
        "pause": _cli(world, "bob", "experiment", "pause", alice_exp),
        "logs": _cli(world, "bob", "trial", "logs", alice_trial),
        "list": _cli(world, "bob", "experiment", "list", "--all", "--json"),
        # bob claims to be alice: his own credentials, alice's Unix name
        "as-alice": _cli(world, "alice", "experiment", "cancel", alice_exp,
                         DETHPC_DATABASE_URL_FILE=str(world.homes["bob"] / ".dethpc" /
                                                      "database_url")),
    })
    rc, stdout, stderr = out.pop("alice-trials")
    assert rc == 0 and '"secret_lr"' in stdout, stderr   # alice sees her own
    rc, stdout, stderr = out.pop("list")
    assert rc == 0, stderr
    assert [e["id"] for e in yaml.safe_load(stdout)] == [world.ids["bob_experiment"]]
    assert "--all shows only your experiments" in stderr and "dethpc_admin" in stderr
    rc, stdout, stderr = out.pop("as-alice")
    assert rc != 0 and "Traceback" not in stderr, stderr
    assert "Unix user 'alice'" in stderr and "role 'bob'" in stderr
    for what, (rc, stdout, stderr) in out.items():
        assert rc != 0, (what, stdout, stderr)
        assert "Traceback" not in stderr and "does not exist" in stderr, (what, stderr)
        assert "secret_lr" not in stdout + stderr
    assert _snapshot(create_engine(world.admin_url)) == before


def test_admin_sees_every_users_experiments_and_its_daemon_acts_on_its_own(world):
    out = _all({"list": _cli(world, "carol", "experiment", "list", "--all", "--json"),
                "tick": _cli(world, "carol", "daemon", "tick"),
                "whoami": _cli(world, "carol", "admin", "db", "whoami", "--json")})
    rc, stdout, stderr = out["list"]
    assert rc == 0 and "--all shows only" not in stderr, stderr
    assert ({e["id"]: e["owner"] for e in yaml.safe_load(stdout)}
            == {world.ids["alice_experiment"]: "alice", world.ids["bob_experiment"]: "bob"})
    assert yaml.safe_load(out["whoami"][1])["scope"] == "all-rows"
    # so does the schema owner (not a superuser: FORCE applies to it, it is an admin)
    owner = Store(world.owner_url)
    try:
        assert owner.role == DatabaseRole(OWNER, Scope.ALL_ROWS)
        with owner.session() as s:
            assert {e.owner for e in s.exec(select(Experiment))} == {"alice", "bob"}
    finally:
        owner.engine.dispose()
    # alice's and bob's experiments are open and carol's role sees them, but her daemon
    # acts on her own experiments only (she has none)
    rc, stdout, stderr = out["tick"]
    assert rc == 0 and "tick: 0 open experiment(s)" in stdout, (stdout, stderr)
    with create_engine(world.admin_url).connect() as conn:
        states: dict[str, str] = dict(conn.execute(  # type: ignore[arg-type]
            text("SELECT owner, state FROM experiment")).all())
        leases: dict[str, str] = dict(conn.execute(  # type: ignore[arg-type]
            text("SELECT owner, holder FROM daemonlease")).all())
    assert states == {"alice": "ACTIVE", "bob": "ACTIVE"}
    assert leases["alice"] == "login:1:abc"


def test_credentials_file_that_others_may_read_is_refused(world, tmp_path):
    leaky = tmp_path / "database_url"
    leaky.write_text(world.urls["alice"] + "\n")
    leaky.chmod(0o644)
    p = _cli(world, "alice", "experiment", "list", DETHPC_DATABASE_URL_FILE=str(leaky))
    rc, stdout, stderr = _all({"list": p})["list"]
    assert rc == 2 and "Traceback" not in stderr, stderr
    assert "mode 0644" in stderr and "chmod 600" in stderr
    assert str(make_url(world.urls["alice"]).password) not in stdout + stderr


def test_a_users_dethpc_never_changes_the_schema(world):
    admin = create_engine(world.admin_url)
    with admin.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0005'"))
    try:
        with pytest.raises(StoreError, match="may not change the schema") as err:
            Store(world.urls["alice"])
        assert "schema owner upgrades it" in str(err.value)
        assert "0005" in str(err.value) and migrations.head_revision() in str(err.value)
        with admin.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() \
                == "0005"
    finally:
        with admin.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :h"),
                         {"h": migrations.head_revision()})


def test_sessions_of_one_role_see_one_owner(world):
    """The models read through a user's Store: only that user's rows, whatever the query."""
    store = Store(world.urls["bob"])
    try:
        with Session(store.engine) as s:
            assert {e.owner for e in s.exec(select(Experiment))} == {"bob"}
            assert s.get(Experiment, world.ids["alice_experiment"]) is None
            assert s.get(Trial, world.ids["alice_trial"]) is None
    finally:
        store.engine.dispose()
