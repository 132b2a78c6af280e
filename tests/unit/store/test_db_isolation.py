"""The parts of multi-user isolation that need no PostgreSQL server (tests/pg has the
database's own enforcement): credentials files refused unless their owner's only, the
URL dethpc opens and its redaction, the role-name rules, migration 0006 changing
nothing on SQLite, and a daemon given an owner acting on that owner's experiments only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from sqlmodel import select

from dethpc.backends.base import JobRequest
from dethpc.backends.local import LocalBackend
from dethpc.common.errors import CommandError, ConfigError, DethpcError
from dethpc.config import load_experiment_config
from dethpc.config.cluster import parse_cluster_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control.daemon import Daemon
from dethpc.control.experiments import create_experiment, current_user
from dethpc.store import Store, migrations
from dethpc.store.access import DatabaseRole, Scope, check_identity, safe_url
from dethpc.store.credentials import ENV_VAR, database_url, read_url_file
from dethpc.store.models import Batch, Experiment
from dethpc.surfaces.admin.dbusers import _exclusive_file, add_user, check_user_name

TOY = Path(__file__).resolve().parents[2] / "fixtures" / "toy"
URL = "postgresql+psycopg://alice:s3cret-Pw@db.example:5432/dethpc"


def _file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "database_url"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_credentials_file_only_its_owner_may_read_is_read(tmp_path):
    path = _file(tmp_path, f"# alice's\n{URL}\n")
    assert read_url_file(path, "database_url_file", "cluster.yaml") == URL


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o700 | 0o060])
def test_a_credentials_file_its_group_or_others_may_access_is_refused(tmp_path, mode):
    path = _file(tmp_path, URL + "\n", mode)
    with pytest.raises(ConfigError) as err:
        read_url_file(path, "database_url_file", "cluster.yaml")
    msg = str(err.value)
    assert f"mode {mode:04o}" in msg and f"chmod 600 {path}" in msg
    assert "database_url_file" in msg and "s3cret" not in msg


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_a_credentials_file_of_another_user_is_refused(tmp_path):
    path = _file(tmp_path, URL + "\n")
    os.chown(path, 65534, 65534)
    with pytest.raises(ConfigError, match="belongs to uid 65534, not to you"):
        read_url_file(path, "database_url_file", "cluster.yaml")


@pytest.mark.parametrize(("text", "words"), [
    (None, "no such file; ask your dethpc admin"),
    ("", "expected one database URL line, found 0"),
    (f"{URL}\n{URL}\n", "expected one database URL line, found 2"),
    ("s3cret-Pw\n", "its line is not a database URL"),
])
def test_a_credentials_file_without_one_url_is_a_clear_error(tmp_path, text, words):
    path = tmp_path / "database_url" if text is None else _file(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        read_url_file(path, ENV_VAR, "the environment")
    assert words in str(err.value) and ENV_VAR in str(err.value)
    assert "s3cret" not in str(err.value)      # a mistyped file may hold the password


def test_which_url_dethpc_opens(tmp_path, monkeypatch):
    own = _file(tmp_path, URL + "\n")
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert database_url(ClusterConfig(database_url="postgresql://db/x")) == "postgresql://db/x"
    assert database_url(ClusterConfig(database_url_file=own)) == URL
    other = tmp_path / "other"
    other.mkdir()
    env_file = _file(other, URL.replace("alice", "bob") + "\n")
    monkeypatch.setenv(ENV_VAR, str(env_file))
    assert database_url(ClusterConfig(database_url_file=own)).startswith(
        "postgresql+psycopg://bob:")


def test_cluster_config_database_url_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = parse_cluster_config({"database_url_file": "~/.dethpc/database_url"})
    assert cfg.database_url_file == tmp_path / ".dethpc" / "database_url"
    with pytest.raises(ConfigError, match="database_url_file: give database_url or "
                                          "database_url_file, not both"):
        parse_cluster_config({"database_url": "postgresql://db/x",
                              "database_url_file": "~/u"})


def test_messages_never_show_a_password():
    assert safe_url(URL) == "postgresql+psycopg://alice:***@db.example:5432/dethpc"
    assert "s3cret" not in safe_url("postgresql://a:s3cret@[bad")


def test_a_normal_role_must_be_named_as_the_unix_user():
    with pytest.raises(DethpcError, match="Unix user 'alice' but connect .* as role 'bob'"):
        check_identity(DatabaseRole("bob", Scope.OWN_ROWS), "alice", "db")
    check_identity(DatabaseRole("alice", Scope.OWN_ROWS), "alice", "db")
    check_identity(DatabaseRole("dethpc", Scope.ALL_ROWS), "root", "db")   # an admin
    check_identity(DatabaseRole("", Scope.PRIVATE_DATABASE), "alice", "db")


@pytest.mark.parametrize("name", ["x y", "-a", "a;drop", "pg_x", "dethpc_admin",
                                  "dethpc_users", "public", "a" * 64, "", 'a"b'])
def test_add_user_refuses_names_that_are_not_user_names(name):
    with pytest.raises(ConfigError, match="NAME: .* is not a user name"):
        check_user_name(name)


def test_add_user_names():
    for name in ("alice", "a.b-c_1", "_svc", "A" * 63):
        check_user_name(name)


def test_sqlite_is_one_users_database(tmp_path):
    """Migration 0006 is PostgreSQL's: on SQLite the database reaches head, holds rows,
    and is the user's own (every row theirs)."""
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert migrations.head_revision() >= "0006"
    assert store.migration is not None and store.migration.head == migrations.head_revision()
    assert store.role == DatabaseRole("", Scope.PRIVATE_DATABASE) and not store.role.shared
    with store.session() as s:
        s.add(Experiment(name="e", config_yaml="", run_dir="/x", owner="anyone"))
    with store.session() as s:
        assert [e.owner for e in s.exec(select(Experiment))] == ["anyone"]
    with pytest.raises(DethpcError, match="is not PostgreSQL"):
        add_user(store, "alice", admin=False, password=True, replace=False,
                 credentials=tmp_path / "cred")
    assert not (tmp_path / "cred").exists()


def test_credentials_file_is_new_and_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        with _exclusive_file(tmp_path / "c") as fd:
            assert fd is not None
            os.write(fd, b"x\n")
    finally:
        os.umask(old)
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o600
    with pytest.raises(DethpcError, match="exists; dethpc does not overwrite"), \
            _exclusive_file(tmp_path / "c"):
        pass
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")      # never followed
    with pytest.raises(DethpcError, match="link exists; dethpc does not overwrite"), \
            _exclusive_file(tmp_path / "link"):
        pass
    assert not (tmp_path / "elsewhere").exists()


class Unreachable(LocalBackend):
    """Records what is submitted, then answers as sbatch does with slurmctld down."""

    def __init__(self, spool: Path) -> None:
        super().__init__(spool)
        self.names: list[str] = []

    def submit(self, request: JobRequest) -> list[str]:
        self.names.append(request.name)
        raise CommandError(["sbatch"], 1, "", "sbatch: error: Batch job submission failed: "
                           "Unable to contact slurm controller (connect failure)")


def test_a_daemon_with_an_owner_acts_on_that_owners_experiments_only(tmp_path):
    """On a shared database an admin's role sees every user's experiments; its daemon is
    given its user as owner and must leave the others' alone."""
    cfg_path = tmp_path / "exp.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "name": "t", "entrypoint": "python3 train.py", "hyperparameters": {"x": 1.0},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 3}}}))
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    cluster = ClusterConfig(runs_root=tmp_path / "runs",
                            pools={"default": ResourcePool(name="default")})
    cfg = load_experiment_config(cfg_path)
    mine, theirs = (create_experiment(store, cluster, cfg, TOY, LocalBackend(tmp_path / "s"))
                    for _ in range(2))
    with store.session() as s:
        other = s.get(Experiment, theirs)
        assert other is not None
        other.owner = "someone-else"
        s.add(other)
    backend = Unreachable(tmp_path / "spool")
    stats = Daemon(store, cluster, backend, owner=current_user()).tick()
    assert stats.experiments == 1
    with store.session() as s:
        assert {b.experiment_id for b in s.exec(select(Batch))} == {mine}
    # the next tick adopts or retries its own SUBMITTING batch, never another owner's
    with store.session() as s:
        s.add(Batch(experiment_id=theirs, name="theirs-batch"))
    backend.names.clear()
    Daemon(store, cluster, backend, owner=current_user()).tick()
    assert backend.names and all("theirs" not in n for n in backend.names)
    # without an owner (a private SQLite database) it acts on every experiment
    assert Daemon(store, cluster, backend).tick().experiments == 2
