"""Which filesystem holds a path, and whether it is a network (shared) one.

Owns: ``parse_mountinfo`` (the text of ``/proc/self/mountinfo`` -> ``Mount`` rows, octal
escapes such as ``\\040`` undone), ``mount_of`` (the mount holding a resolved path: the
longest mount-point prefix, the last of those stacked on one point), ``is_network`` (a
kernel filesystem type name -> shared by other machines or not) and ``filesystem_of``,
the one side effect: one read of ``/proc/self/mountinfo`` through ``read_mountinfo``
(the seam tests replace).
Must not: warn or decide anything (the store's location, ``dethpc.store.location``,
says what it means for the database); read more than that one file and the path's own
``realpath``.

Why mountinfo rather than ``statfs(2)``'s ``f_type`` magic: the kernel writes the type's
*name* there, the same one ``mount -t`` and ``findmnt`` use, including a FUSE
filesystem's subtype (``fuse.sshfs``, ``fuse.glusterfs``), which statfs reports as one
FUSE magic for all; the out-of-tree network filesystems (Lustre, GPFS, BeeGFS, WekaFS)
have no magic in the kernel's headers to compare with; and reading it is pure text,
table-tested. It is the calling process's own mount namespace, so a container or a
private ``/tmp`` answers for what dethpc really writes through. A bind mount shows its
source filesystem's type; an automounted home (``autofs``) is mounted by resolving the
path first, and then shows the real type stacked above the ``autofs`` entry.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")

#: kernel filesystem type names (mountinfo's field after ``-``) of filesystems that other
#: machines reach too: network clients, cluster and parallel filesystems. SQLite's POSIX
#: locks are unreliable on them (https://www.sqlite.org/faq.html#q5), and several login
#: nodes may open the same file through them.
NETWORK_FSTYPES: frozenset[str] = frozenset({
    "nfs", "nfs4",                     # NFS (v2/v3, v4)
    "lustre",                          # Lustre client
    "gpfs",                            # IBM Storage Scale (GPFS)
    "beegfs", "fhgfs",                 # BeeGFS (fhgfs: its name before 2014)
    "ceph",                            # CephFS kernel client
    "glusterfs",                       # GlusterFS (its FUSE client: fuse.glusterfs)
    "cifs", "smb3", "smbfs",           # SMB/CIFS shares
    "panfs",                           # Panasas PanFS
    "pvfs2", "orangefs",               # OrangeFS (its kernel client registers pvfs2)
    "wekafs",                          # WEKA
    "dvs",                             # HPE Cray DVS (projects Lustre/GPFS to nodes)
    "afs", "openafs",                  # AFS
    "9p",                              # Plan 9 protocol (WSL, virtual machines' shares)
    "gfs2", "ocfs2",                   # shared-disk cluster filesystems
    "autofs",                          # an automount point not mounted yet: nearly always NFS
})

#: FUSE subtypes (``fuse.<subtype>``) that are network clients
NETWORK_FUSE_SUBTYPES: frozenset[str] = frozenset({
    "sshfs", "glusterfs", "ceph-fuse", "cephfs", "beegfs", "s3fs", "gcsfuse", "rclone",
    "juicefs", "mfs", "lizardfs", "quobyte", "davfs", "cvmfs",
})


@dataclass(frozen=True)
class Mount:
    """One row of ``/proc/<pid>/mountinfo`` (proc(5)), the fields dethpc uses."""

    #: where it is mounted, escapes undone (``/mnt/my disk``)
    mount_point: str
    #: the kernel's type name (``nfs4``, ``ext4``, ``fuse.sshfs``)
    fstype: str
    #: what is mounted (``server:/export``, ``/dev/sda1``, ``tmpfs``)
    source: str = ""
    #: the directory of the source filesystem seen at ``mount_point`` (``/`` unless a
    #: bind mount of a subdirectory)
    root: str = "/"

    @property
    def network(self) -> bool:
        return is_network(self.fstype)


def is_network(fstype: str) -> bool:
    """True when filesystems of type ``fstype`` are shared with other machines (network
    clients, parallel and cluster filesystems); False for local disks, memory and
    pseudo-filesystems (``ext4``, ``xfs``, ``btrfs``, ``zfs``, ``overlay``, ``tmpfs``)
    and for FUSE filesystems not known as network ones."""
    name = fstype.strip().lower()
    if name.startswith("fuse.") or name.startswith("fuseblk."):
        return name.split(".", 1)[1] in NETWORK_FUSE_SUBTYPES
    return name in NETWORK_FSTYPES


_OCTAL = re.compile(r"\\([0-7]{3})")


def unescape(field: str) -> str:
    """A mountinfo field with the kernel's octal escapes undone (``\\040`` space,
    ``\\011`` tab, ``\\012`` newline, ``\\134`` backslash)."""
    return _OCTAL.sub(lambda m: chr(int(m[1], 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """Each well-formed line of ``/proc/<pid>/mountinfo``, in the file's order (a mount
    comes after the one it is stacked on). A line is: id, parent id, major:minor, root,
    mount point, options, optional fields (any number), ``-``, type, source, super
    options; a line without that shape is skipped."""
    out: list[Mount] = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < sep + 3:
            continue
        out.append(Mount(mount_point=unescape(fields[4]), fstype=fields[sep + 1],
                         source=unescape(fields[sep + 2]), root=unescape(fields[3])))
    return out


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount holding absolute, resolved ``path``: the one with the longest mount point
    that is ``path`` or one of its ancestors; of several on the same point, the last
    (the one on top). None when nothing matches (no ``/`` row)."""
    best: Mount | None = None
    for m in mounts:
        mp = m.mount_point
        if mp == "/" or path == mp or path.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) >= len(best.mount_point):
                best = m
    return best


def read_mountinfo() -> str | None:
    """This process's mount table; None where there is none to read (not Linux, no
    ``/proc``)."""
    try:
        return MOUNTINFO.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return None


def existing_ancestor(path: Path) -> Path:
    """``path`` resolved, or its nearest ancestor that exists, resolved (a file about to be
    created lives where its directory does)."""
    p = Path(os.path.abspath(os.path.expanduser(path)))
    while not _exists(p) and p != p.parent:
        p = p.parent
    return Path(os.path.realpath(p))


def _exists(p: Path) -> bool:
    """``p`` exists; a path this user may not look at (another user's home: EACCES, which
    ``Path.exists`` raises) counts as absent, so its nearest visible ancestor answers."""
    try:
        return p.exists()
    except OSError:
        return False


def filesystem_of(path: Path) -> Mount | None:
    """The mount that holds ``path`` (which need not exist yet); None when the mount table
    cannot be read. One read of ``/proc/self/mountinfo``."""
    text = read_mountinfo()
    if text is None:
        return None
    return mount_of(str(existing_ancestor(path)), parse_mountinfo(text))
