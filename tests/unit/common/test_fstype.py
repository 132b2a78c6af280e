"""``dethpc.common.fstype``: the mount table parsed, the mount of a path, network or local.

Tables over real-looking ``/proc/self/mountinfo`` lines (proc(5)); the real mount table
of this machine checked against util-linux's ``findmnt``; a tmpfs mounted for the test
where this process may mount one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from dethpc.common import fstype
from dethpc.common.fstype import (
    Mount,
    existing_ancestor,
    filesystem_of,
    is_network,
    mount_of,
    parse_mountinfo,
    unescape,
)
from tests.fixtures.mounts import tmpfs_or_skip

#: a login node: overlay root (a container), an NFS home, Lustre and GPFS scratch, a bind
#: mount of a subdirectory, a path with a space, optional fields, a FUSE sshfs mount
MOUNTINFO = """\
22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
23 22 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw
24 22 0:5 / /dev rw,nosuid shared:3 - devtmpfs devtmpfs rw,size=8g,mode=755
25 22 254:1 / /tmp rw,relatime shared:4 - ext4 /dev/vda1 rw
26 22 0:44 / /home rw,relatime shared:5 - autofs systemd-1 rw,fd=31,pgrp=1,timeout=0
27 26 0:50 / /home rw,relatime shared:6 - nfs4 nas1:/export/home rw,vers=4.2,rsize=1048576
28 22 0:51 / /lustre/scratch rw,lazystatfs shared:7 master:1 - lustre 10.0.0.1@o2ib:/scratch rw
29 22 0:52 / /gpfs/projects rw,relatime shared:8 - gpfs projects rw
30 25 254:1 /data/shared /srv/shared rw,relatime shared:4 - ext4 /dev/vda1 rw
31 25 0:53 / /tmp/my\\040disk rw,relatime - tmpfs tmp\\040fs rw,size=1g
32 22 0:54 / /mnt/remote rw,nosuid,nodev - fuse.sshfs alice@far:/data rw,user_id=1000
33 22 0:55 / /home2 rw,relatime - xfs /dev/sdb1 rw
this line is not a mount
"""


@pytest.mark.parametrize(("name", "network"), [
    ("nfs", True), ("nfs4", True), ("lustre", True), ("gpfs", True), ("beegfs", True),
    ("ceph", True), ("fuse.ceph-fuse", True), ("glusterfs", True), ("fuse.glusterfs", True),
    ("cifs", True), ("smb3", True), ("fuse.sshfs", True), ("panfs", True), ("pvfs2", True),
    ("orangefs", True), ("wekafs", True), ("9p", True), ("afs", True), ("dvs", True),
    ("autofs", True), ("NFS4", True),
    ("ext4", False), ("xfs", False), ("btrfs", False), ("zfs", False), ("overlay", False),
    ("tmpfs", False), ("ramfs", False), ("fuse", False), ("fuseblk", False),
    ("fuse.portal", False), ("fuse.gvfsd-fuse", False), ("squashfs", False),
    ("devtmpfs", False), ("", False),
])
def test_is_network(name: str, network: bool) -> None:
    assert is_network(name) is network


@pytest.mark.parametrize(("field", "expected"), [
    ("/plain", "/plain"),
    ("/tmp/my\\040disk", "/tmp/my disk"),
    ("/a\\011tab\\012nl", "/a\ttab\nnl"),
    ("/back\\134slash", "/back\\slash"),
    ("/not\\9octal", "/not\\9octal"),
])
def test_unescape(field: str, expected: str) -> None:
    assert unescape(field) == expected


def test_parse_mountinfo_takes_every_well_formed_line_in_order() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert len(mounts) == 12  # the last line is skipped
    assert mounts[0] == Mount("/", "overlay", "overlay", "/")
    # optional fields of any number before "-" (shared:7 master:1)
    assert mounts[6] == Mount("/lustre/scratch", "lustre", "10.0.0.1@o2ib:/scratch", "/")
    # a bind mount: the source filesystem's type, the directory it shows
    assert mounts[8] == Mount("/srv/shared", "ext4", "/dev/vda1", "/data/shared")
    # escapes undone in the mount point and the source
    assert mounts[9] == Mount("/tmp/my disk", "tmpfs", "tmp fs", "/")
    assert mounts[10].fstype == "fuse.sshfs" and mounts[10].network


@pytest.mark.parametrize(("path", "fstype", "mount_point"), [
    ("/", "overlay", "/"),
    ("/opt/sw/bin", "overlay", "/"),
    # NFS mounted over the autofs point: the one on top answers
    ("/home", "nfs4", "/home"),
    ("/home/alice/.dethpc/dethpc.db", "nfs4", "/home"),
    # /home2 is not under /home
    ("/home2/alice", "xfs", "/home2"),
    ("/lustre/scratch/alice", "lustre", "/lustre/scratch"),
    ("/lustre", "overlay", "/"),
    ("/gpfs/projects/p1/x", "gpfs", "/gpfs/projects"),
    ("/srv/shared/alice", "ext4", "/srv/shared"),
    ("/tmp/my disk/h", "tmpfs", "/tmp/my disk"),
    ("/tmp/my", "ext4", "/tmp"),
    ("/mnt/remote/d", "fuse.sshfs", "/mnt/remote"),
])
def test_mount_of_is_the_longest_mount_point_and_the_top_of_a_stack(
        path: str, fstype: str, mount_point: str) -> None:
    m = mount_of(path, parse_mountinfo(MOUNTINFO))
    assert m is not None
    assert (m.fstype, m.mount_point) == (fstype, mount_point)


def test_mount_of_without_a_root_row_is_none() -> None:
    assert mount_of("/x", [Mount("/y", "ext4")]) is None
    assert mount_of("/x", []) is None


def test_existing_ancestor_of_a_file_not_yet_created(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert existing_ancestor(tmp_path / "link" / "a" / "b.db") == real.resolve()


def test_filesystem_of_reads_the_seam_once_and_none_without_a_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def fake() -> str:
        calls.append(1)
        return (f"1 0 0:1 / / rw - ext4 /dev/sda1 rw\n"
                f"2 1 0:2 / {os.path.realpath(tmp_path)} rw - nfs4 srv:/h rw\n")

    monkeypatch.setattr(fstype, "read_mountinfo", fake)
    m = filesystem_of(tmp_path / "home" / "dethpc.db")
    assert m is not None and m.fstype == "nfs4" and m.network
    assert calls == [1]
    monkeypatch.setattr(fstype, "read_mountinfo", lambda: None)
    assert filesystem_of(tmp_path) is None


def _findmnt(path: Path) -> str:
    return subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "--target", str(path)],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(not Path("/proc/self/mountinfo").exists(), reason="no /proc (not Linux)")
@pytest.mark.skipif(shutil.which("findmnt") is None, reason="no findmnt (util-linux)")
def test_this_machine_answers_as_findmnt_does(tmp_path: Path) -> None:
    for path in (tmp_path, Path.home(), Path("/")):
        m = filesystem_of(path)
        assert m is not None
        assert m.fstype == _findmnt(path), path


def test_a_real_tmpfs_is_found_and_is_not_network(tmp_path: Path) -> None:
    with tmpfs_or_skip(tmp_path / "tmpfs") as where:
        m = filesystem_of(where / "home" / "dethpc.db")
        assert m is not None
        assert (m.fstype, m.source, m.mount_point) == ("tmpfs", "dethpc-test",
                                                       os.path.realpath(where))
        assert not m.network


def test_a_path_this_user_may_not_look_at_answers_by_its_visible_ancestor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's home (tests/slurm/test_isolation_slurm.py: ``nobody`` running
    dethpc on dethpc-user's database): ``Path.exists`` raises EACCES there; the lookup
    answers for the nearest ancestor it can see instead of a traceback."""
    from dethpc.common import fstype

    home = tmp_path / "home"
    home.mkdir()
    real_exists = Path.exists

    def exists(p: Path, **kw: object) -> bool:
        if p == home / "dethpc.db":
            raise PermissionError(13, "Permission denied", str(p))
        return real_exists(p)

    monkeypatch.setattr(Path, "exists", exists)
    assert fstype.existing_ancestor(home / "dethpc.db") == home.resolve()
