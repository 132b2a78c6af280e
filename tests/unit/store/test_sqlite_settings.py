"""``dethpc.store.sqlite``: WAL where the database file is on a local filesystem, the
rollback journal on a network one or one that cannot be told, ``synchronous=FULL`` in
both (the mount table faked at its seam, ``dethpc.common.fstype.read_mountinfo``); a CLI
reader's open transaction does not hold the daemon's commit back in WAL mode."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dethpc.common import fstype
from dethpc.store import Store
from dethpc.store.sqlite import SqliteSettings
from tests.unit.store.test_location import fake_mounts

FULL = 2


def modes(store: Store) -> tuple[str, int]:
    with store.engine.connect() as c:
        return (str(c.exec_driver_sql("PRAGMA journal_mode").scalar()),
                int(c.exec_driver_sql("PRAGMA synchronous").scalar() or 0))


def local_mounts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fstype, "read_mountinfo",
                        lambda: "21 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n")


def test_a_local_file_gets_wal_and_full_sync(tmp_path: Path, monkeypatch) -> None:
    local_mounts(monkeypatch)
    assert modes(Store(f"sqlite:///{tmp_path / 'd.db'}")) == ("wal", FULL)


def test_a_network_file_keeps_the_rollback_journal_and_leaves_wal(tmp_path: Path,
                                                                   monkeypatch) -> None:
    local_mounts(monkeypatch)
    db = tmp_path / "home" / "d.db"
    Store(f"sqlite:///{db}").engine.dispose()      # made on a local disk: WAL
    fake_mounts(monkeypatch, tmp_path / "home")    # the home now seen on NFS
    assert modes(Store(f"sqlite:///{db}")) == ("delete", FULL)


def test_an_unknown_filesystem_keeps_the_rollback_journal(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(fstype, "read_mountinfo", lambda: None)
    assert modes(Store(f"sqlite:///{tmp_path / 'd.db'}")) == ("delete", FULL)


@pytest.mark.parametrize(("local", "journal", "sync", "want"), [
    (True, "", "", SqliteSettings("wal", "full")),
    (False, "", "", SqliteSettings("delete", "full")),
    (None, "", "", SqliteSettings("delete", "full")),
    (True, "delete", "normal", SqliteSettings("delete", "normal")),
    (False, "wal", "", SqliteSettings("delete", "full")),   # never WAL on a network fs
    (None, "WAL", "bogus", SqliteSettings("delete", "full")),
    (True, "bogus", "NORMAL", SqliteSettings("wal", "normal")),
])
def test_overrides(local: bool | None, journal: str, sync: str, want: SqliteSettings,
                   monkeypatch) -> None:
    monkeypatch.setenv("DETHPC_SQLITE_JOURNAL", journal)
    monkeypatch.setenv("DETHPC_SQLITE_SYNCHRONOUS", sync)
    assert SqliteSettings.for_file(local) == want


def test_a_readers_open_transaction_does_not_hold_back_the_writers_commit(
        tmp_path: Path, monkeypatch) -> None:
    local_mounts(monkeypatch)
    monkeypatch.setenv("DETHPC_DB_BUSY_TIMEOUT_S", "0.3")
    db = tmp_path / "d.db"
    store = Store(f"sqlite:///{db}")
    with store.engine.begin() as c:
        c.exec_driver_sql("CREATE TABLE probe (x INTEGER)")
    reader = sqlite3.connect(db, timeout=0.3, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM probe").fetchone() == (0,)
    with store.engine.begin() as c:          # the daemon commits while a view reads
        c.exec_driver_sql("INSERT INTO probe VALUES (1)")
    assert reader.execute("SELECT count(*) FROM probe").fetchone() == (0,)  # its snapshot
    reader.execute("COMMIT")
    assert reader.execute("SELECT count(*) FROM probe").fetchone() == (1,)
    reader.close()
