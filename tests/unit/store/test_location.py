"""``dethpc.store.location``: where the store is, and the network-filesystem warning said
once per home (the mount table faked at its seam, ``dethpc.common.fstype.read_mountinfo``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dethpc.common import fstype
from dethpc.store.location import (
    WARNED_MARKER,
    check_store,
    default_url,
    locate,
    sqlite_path,
    warn_once,
)


def fake_mounts(monkeypatch: pytest.MonkeyPatch, under: Path, kind: str = "nfs4") -> list[int]:
    """The mount table says ``under`` is a ``kind`` mount of ``nas1:/export/home`` over an
    ext4 root; returns the list that counts the reads."""
    reads: list[int] = []

    def read() -> str:
        reads.append(1)
        return ("21 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
                f"40 21 0:50 / {os.path.realpath(under)} rw,relatime shared:9 - {kind} "
                "nas1:/export/home rw,vers=4.2\n")

    monkeypatch.setattr(fstype, "read_mountinfo", read)
    return reads


@pytest.mark.parametrize(("url", "path"), [
    ("sqlite:////home/a/.dethpc/dethpc.db", Path("/home/a/.dethpc/dethpc.db")),
    ("sqlite:///rel.db", Path("rel.db")),
    ("sqlite:////x/y.db?timeout=5", Path("/x/y.db")),
    ("sqlite://", None),
    ("sqlite:///:memory:", None),
    ("postgresql+psycopg://u:pw@db:5432/dethpc", None),
])
def test_sqlite_path(url: str, path: Path | None) -> None:
    assert sqlite_path(url) == path


def test_default_url_is_the_file_in_dethpc_home(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("DETHPC_HOME", str(tmp_path))
    assert default_url() == f"sqlite:///{tmp_path / 'dethpc.db'}"


def test_sqlite_on_nfs_is_network_and_unsafe(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    fake_mounts(monkeypatch, tmp_path)
    loc = locate(f"sqlite:///{tmp_path / 'home' / 'dethpc.db'}")
    assert loc.mount is not None and loc.mount.fstype == "nfs4"
    assert loc.network and loc.safe is False
    assert "on nfs4 (nas1:/export/home mounted at" in loc.describe()
    assert "a network filesystem, unsafe for SQLite" in loc.describe()
    assert loc.to_dict()["fstype"] == "nfs4"


def test_sqlite_on_local_disk_is_safe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_mounts(monkeypatch, tmp_path, kind="xfs")
    loc = locate(f"sqlite:///{tmp_path / 'dethpc.db'}")
    assert not loc.network and loc.safe is True
    assert loc.describe().endswith("local, safe for SQLite")


def test_an_unreadable_mount_table_is_unknown_not_a_warning(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(fstype, "read_mountinfo", lambda: None)
    loc = locate(f"sqlite:///{tmp_path / 'dethpc.db'}")
    assert loc.safe is None and not loc.network
    assert "could not tell" in loc.describe()
    assert not warn_once(loc, tmp_path, say=lambda _: pytest.fail("said"))


def test_postgresql_is_safe_its_password_masked_and_the_mount_table_unread(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    reads = fake_mounts(monkeypatch, tmp_path)
    loc = locate("postgresql+psycopg://alice:s3cret@db.example:5432/dethpc")
    assert loc.url == "postgresql+psycopg://alice:***@db.example:5432/dethpc"
    assert "s3cret" not in loc.describe() and "s3cret" not in str(loc.to_dict())
    assert loc.path is None and loc.safe is True and not loc.network
    assert not warn_once(loc, tmp_path, say=lambda _: pytest.fail("said"))
    assert reads == []


def test_the_warning_is_said_once_per_home(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    reads = fake_mounts(monkeypatch, tmp_path)
    said: list[str] = []
    loc = locate(f"sqlite:///{home / 'dethpc.db'}")
    assert warn_once(loc, home, said.append)
    assert not warn_once(locate(f"sqlite:///{home / 'dethpc.db'}"), home, said.append)
    assert len(said) == 1 and len(reads) == 2  # one read of the table per command
    text = said[0]
    # what, why, the fix
    assert f"the state database {home / 'dethpc.db'} is on nfs4 (nas1:/export/home" in text
    assert "SQLite's file locking is unreliable there" in text
    assert "database_url" in text and "DETHPC_HOME" in text and "--remote" in text
    assert f"remove {home / WARNED_MARKER} to see it again" in text
    assert (home / WARNED_MARKER).read_text().startswith(f"{home / 'dethpc.db'} on nfs4")
    # another home hears it too
    other = tmp_path / "other"
    other.mkdir()
    assert warn_once(locate(f"sqlite:///{other / 'dethpc.db'}"), other, said.append)


def test_a_home_that_cannot_keep_the_marker_still_hears_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_mounts(monkeypatch, tmp_path)
    gone = tmp_path / "no-such-home"
    said: list[str] = []
    assert warn_once(locate(f"sqlite:///{gone / 'dethpc.db'}"), gone, said.append)
    assert len(said) == 1 and not (gone / WARNED_MARKER).exists()


def test_check_store_reads_the_mount_table_only_until_it_has_said_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    reads = fake_mounts(monkeypatch, tmp_path)
    said: list[str] = []
    url = f"sqlite:///{home / 'dethpc.db'}"
    assert check_store(url, home, said.append)
    assert not check_store(url, home, said.append)
    assert len(said) == 1 and reads == [1]  # the second command: one stat, no table
    assert not check_store("postgresql+psycopg://u:pw@db/d", home / "x", said.append)
    assert reads == [1]
