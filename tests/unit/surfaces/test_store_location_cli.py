"""The store on a network filesystem, through the CLI in-process: the warning said once, on
stderr (``--json`` stdout stays JSON); ``config show-cluster`` and ``admin check`` say
where the store is. The mount table is faked at its seam to say ``nfs4``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dethpc.common.fstype import Mount
from dethpc.config.model import ClusterConfig
from dethpc.store.location import WARNED_MARKER, StoreLocation
from dethpc.surfaces.admin.checks import store_finding
from dethpc.surfaces.admin.facts import ClusterFacts
from dethpc.surfaces.cli import admin_cmd
from dethpc.surfaces.cli.main import app
from tests.fixtures.cli_home import private_home
from tests.fixtures.mounts import tmpfs_or_skip
from tests.unit.store.test_location import fake_mounts

WARNING = "is on nfs4 (nas1:/export/home mounted at"


def cli(*args: str) -> tuple[int, str, str]:
    from dethpc.surfaces.cli.common import ENV

    for name in ("cluster", "store", "backend"):  # a new process each time, as a user's
        ENV.__dict__.pop(name, None)
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_the_warning_is_said_once_on_stderr(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_mounts(monkeypatch, home.parent)
    code, out, err = cli("experiment", "list", "--json")
    assert code == 0, err
    assert json.loads(out) == []
    assert err.count(WARNING) == 1
    assert f"the state database {home / 'dethpc.db'} {WARNING}" in err
    assert WARNING not in out
    assert (home / WARNED_MARKER).exists()
    code, out, err = cli("experiment", "list", "--json")
    assert code == 0 and json.loads(out) == []
    assert WARNING not in err


def test_no_warning_on_a_local_disk(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_mounts(monkeypatch, home.parent, kind="ext4")
    code, _, err = cli("experiment", "list")
    assert code == 0 and "warning" not in err
    assert not (home / WARNED_MARKER).exists()


def test_show_cluster_says_where_the_store_is(home: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fake_mounts(monkeypatch, home.parent)
    code, out, _ = cli("config", "show-cluster")
    assert code == 0
    line = next(ln for ln in out.splitlines() if ln.startswith("# store:"))
    assert line == (f"# store: SQLite file {home / 'dethpc.db'} on nfs4 (nas1:/export/home "
                    "mounted at "
                    f"{home.parent.resolve()}): a network filesystem, unsafe for SQLite")
    assert yaml.safe_load(out)["backend"] == "local"  # still the YAML to save


def test_show_cluster_masks_a_server_password(home: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    reads = fake_mounts(monkeypatch, home.parent)
    cfg = home / "cluster.yaml"
    cfg.write_text(cfg.read_text() + "database_url: postgresql+psycopg://u:s3cret@db/dethpc\n")
    code, out, _ = cli("config", "show-cluster")
    assert code == 0
    assert "# store: database server postgresql+psycopg://u:***@db/dethpc" in out
    assert "s3cret" not in out and reads == []


def _slurm_config(home: Path, extra: str = "") -> None:
    (home / "cluster.yaml").write_text(
        f"backend: slurm\nruns_root: {home / 'runs'}\npools: {{a: {{partition: debug}}}}\n"
        f"default_pool: a\nreport_bad_nodes: false\n{extra}")


def _admin_check(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    facts = ClusterFacts(user="alice", config={"ClusterName": "c", "MaxArraySize": "1001"},
                         partitions={}, nodes=())
    monkeypatch.setattr(admin_cmd, "gather_facts", lambda runner, user: facts)
    _, out, _ = cli("admin", "check", "--json")
    findings = json.loads(out)["findings"]
    return {f["check"]: f for f in findings if f["pool"] == ""}


def test_admin_check_warns_of_the_users_store_on_nfs(home: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fake_mounts(monkeypatch, home.parent)
    _slurm_config(home)
    store = _admin_check(monkeypatch)["store"]
    assert store["severity"] == "warning"
    assert f"SQLite in their DETHPC_HOME (here {home / 'dethpc.db'}) {WARNING}" in \
        store["message"]
    assert "database_url" in store["fix"] and "DETHPC_HOME" in store["fix"]


def test_admin_check_is_content_with_a_server_or_local_disk(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_mounts(monkeypatch, home.parent, kind="xfs")
    _slurm_config(home)
    assert _admin_check(monkeypatch)["store"]["severity"] == "ok"
    fake_mounts(monkeypatch, home.parent)
    _slurm_config(home, "database_url: postgresql+psycopg://u:s3cret@db/dethpc\n")
    store = _admin_check(monkeypatch)["store"]
    assert store["severity"] == "ok"
    assert store["message"] == "shared database: postgresql+psycopg://u:***@db/dethpc"


def test_a_home_on_a_real_tmpfs_gets_no_warning(tmp_path: Path) -> None:
    """This machine's own mount table, unfaked: a home on a tmpfs mounted for the test."""
    with tmpfs_or_skip(tmp_path / "tmpfs") as where, private_home(where / "home") as home:
        code, out, err = cli("experiment", "list", "--json")
        assert code == 0 and json.loads(out) == [] and "warning" not in err
        assert (home / "dethpc.db").exists() and not (home / WARNED_MARKER).exists()
        _, out, _ = cli("config", "show-cluster")
        assert (f"# store: SQLite file {home / 'dethpc.db'} on tmpfs (dethpc-test mounted at "
                f"{os.path.realpath(where)}): local, safe for SQLite") in out


_NFS = Mount("/home", "nfs4", "nas1:/export/home")


@pytest.mark.parametrize(("cfg", "loc", "severity", "words"), [
    (ClusterConfig(database_url_file=Path("~/.dethpc/database_url")), None, "ok",
     "each user's database URL is read from database_url_file (~/.dethpc/database_url)"),
    (ClusterConfig(database_url="postgresql://db/d"), StoreLocation("postgresql://db/d"), "ok",
     "shared database: postgresql://db/d"),
    (ClusterConfig(), StoreLocation("sqlite:////home/a/.dethpc/dethpc.db",
                                    Path("/home/a/.dethpc/dethpc.db"), _NFS), "warning",
     "each user's default store, SQLite in their DETHPC_HOME (here /home/a/.dethpc/dethpc.db) "
     "is on nfs4 (nas1:/export/home mounted at /home), a network filesystem"),
    (ClusterConfig(database_url="sqlite:////home/s.db"),
     StoreLocation("sqlite:////home/s.db", Path("/home/s.db"), _NFS), "warning",
     "database_url's SQLite file /home/s.db is on nfs4"),
    (ClusterConfig(), StoreLocation("sqlite:////l/d.db", Path("/l/d.db"), Mount("/", "xfs")),
     "ok", "(here /l/d.db) is on xfs at /: local, safe for SQLite"),
    (ClusterConfig(), StoreLocation("sqlite:////l/d.db", Path("/l/d.db"), None), "warning",
     "its filesystem could not be told"),
])
def test_store_finding(cfg: ClusterConfig, loc: StoreLocation | None, severity: str,
                       words: str) -> None:
    f = store_finding(cfg, loc)
    assert (f.pool, f.check, f.severity.value) == ("", "store", severity)
    assert words in f.message
    assert bool(f.fix) is (severity != "ok")
