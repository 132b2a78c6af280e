"""The context's upload to the login node: a content-addressed area over SFTP.

Layout under the area (default ``~/.dethpc/remote`` on the login node):
``objects/<sha256>`` one file per distinct content; ``objects/<sha256>.part`` an upload
under way (an interrupted one resumes from its size); ``trees/<manifest sha256>/`` a
context rebuilt from objects by the far side's ``dethpc remote-tree`` (hard links).

Owns: hashing the files ``.detignore`` keeps (``dethpc.control.snapshot.list_context``), the
pure plan of what to send (``plan``), sending it (``send``) and the manifest.
Must not: run commands on the far side (``forward`` does).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko

from dethpc.control.snapshot import check_size, list_context
from dethpc.surfaces.remote.target import RemoteError

CHUNK = 256 * 1024
PART = ".part"


@dataclass(frozen=True)
class LocalFile:
    rel: str
    sha: str
    size: int
    executable: bool = False


@dataclass(frozen=True)
class Send:
    """One object to send: ``size`` bytes of ``source`` (a local path), from ``offset``."""

    sha: str
    source: str
    size: int
    offset: int = 0


@dataclass
class Report:
    sent: list[str] = field(default_factory=list)       # objects sent from the start
    resumed: list[str] = field(default_factory=list)    # objects continued from a .part
    present: int = 0                                    # objects already there
    bytes_sent: int = 0


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def local_files(context: Path) -> list[LocalFile]:
    """The files of ``context`` that ``.detignore`` keeps, hashed (size limit enforced)."""
    files = list_context(context)
    check_size(files)
    out = []
    for f in files:
        path = context / f.rel
        out.append(LocalFile(f.rel, sha256_file(path), f.size,
                             bool(path.stat().st_mode & stat.S_IXUSR)))
    return out


def plan(wanted: Iterable[tuple[str, str, int]], present: Mapping[str, int]) -> list[Send]:
    """What to send. ``wanted``: (sha, local source, size), duplicates allowed;
    ``present``: the objects directory's file names and sizes. An object whose size is
    right is kept; a ``.part`` no longer than the object resumes from its size; anything
    else (a wrong-size object, an over-long part) is sent again from the start."""
    out: list[Send] = []
    seen: set[str] = set()
    for sha, source, size in wanted:
        if sha in seen:
            continue
        seen.add(sha)
        if present.get(sha) == size:
            continue
        part = present.get(sha + PART)
        offset = part if part is not None and part <= size else 0
        out.append(Send(sha, source, size, offset))
    return out


def manifest(files: list[LocalFile], config_name: str, config_sha: str) -> bytes:
    """The tree's description (its sha256 names the tree): context files with content
    and executable bit, and the experiment config's name and content."""
    doc: dict[str, Any] = {"config": [config_name, config_sha],
                           "context": {f.rel: [f.sha, f.executable] for f in files}}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def mkdirs(sftp: paramiko.SFTPClient, path: str) -> None:
    parts = path.split("/")
    for i in range(1, len(parts) + 1):
        sub = "/".join(parts[:i])
        if not sub:
            continue
        try:
            sftp.stat(sub)
        except FileNotFoundError:
            try:
                sftp.mkdir(sub, 0o700)
            except OSError:
                sftp.stat(sub)  # made meanwhile by another call, else raises


def present_objects(sftp: paramiko.SFTPClient, objects: str) -> dict[str, int]:
    return {a.filename: int(a.st_size or 0) for a in sftp.listdir_attr(objects)}


Progress = Callable[[Send, int], None]


def send(sftp: paramiko.SFTPClient, objects: str, todo: list[Send],
         progress: Progress | None = None, report: Report | None = None) -> Report:
    """Send ``todo`` into ``objects``: each into its ``.part`` (appending from its
    offset), size checked, then renamed to its hash. ``progress(send, bytes_so_far)``
    is called after every chunk (a test seam: it may drop the connection)."""
    report = report or Report()
    for item in todo:
        part = f"{objects}/{item.sha}{PART}"
        done = item.offset
        with open(item.source, "rb") as src, sftp.open(part, "ab" if done else "wb") as dst:
            dst.set_pipelined(True)
            src.seek(done)
            while done < item.size:
                block = src.read(min(CHUNK, item.size - done))
                if not block:
                    raise RemoteError(f"{item.source} shrank while it was being uploaded")
                dst.write(block)
                done += len(block)
                report.bytes_sent += len(block)
                if progress:
                    progress(item, done)
        size = sftp.stat(part).st_size
        if size != item.size:
            sftp.remove(part)
            raise RemoteError(f"upload of {item.source} arrived as {size} bytes, not "
                              f"{item.size}; run the command again")
        sftp.posix_rename(part, f"{objects}/{item.sha}")
        (report.resumed if item.offset else report.sent).append(item.sha)
    return report


def upload_tree(sftp: paramiko.SFTPClient, area: str, context: Path, config_file: Path,
                progress: Progress | None = None) -> tuple[str, Report]:
    """Upload the context and the config into ``area`` (absolute); returns the manifest's
    sha256 (the far side's ``dethpc remote-tree`` builds the tree from it) and what was
    sent."""
    files = local_files(context)
    config_sha = sha256_file(config_file)
    doc = manifest(files, config_file.name, config_sha)
    doc_sha = hashlib.sha256(doc).hexdigest()
    objects = f"{area}/objects"
    mkdirs(sftp, objects)
    present = present_objects(sftp, objects)
    wanted = [(f.sha, str(context / f.rel), f.size) for f in files]
    wanted.append((config_sha, str(config_file), config_file.stat().st_size))
    todo = plan(wanted, present)
    report = send(sftp, objects, todo, progress)
    report.present = len({w[0] for w in wanted}) - len(todo)
    if present.get(doc_sha) != len(doc):
        with sftp.open(f"{objects}/{doc_sha}{PART}", "wb") as f:
            f.write(doc)
        sftp.posix_rename(f"{objects}/{doc_sha}{PART}", f"{objects}/{doc_sha}")
    return doc_sha, report


def build_tree(area: Path, manifest_sha: str) -> tuple[Path, Path]:
    """On the login node: the tree a manifest names, built from the objects by hard
    link (a copy where the executable bit differs or links fail); returns (context
    directory, config file). Idempotent: an existing tree is reused."""
    objects = area / "objects"
    try:
        doc = json.loads((objects / manifest_sha).read_bytes())
        config_name, config_sha = doc["config"]
        context: dict[str, list[Any]] = doc["context"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RemoteError(f"remote-tree: manifest {manifest_sha} in {objects} is missing or "
                          f"unreadable ({exc}); upload again") from None
    tree = area / "trees" / manifest_sha
    result = (tree / "context", tree / Path(config_name).name)
    if tree.is_dir():
        return result
    tmp = tree.with_name(f"{manifest_sha}.tmp{os.getpid()}")
    (tmp / "context").mkdir(parents=True)
    for rel, (sha, executable) in sorted(context.items()):
        if rel.startswith("/") or ".." in Path(rel).parts:
            raise RemoteError(f"remote-tree: manifest path {rel!r} leaves the tree")
        _place(objects / sha, tmp / "context" / rel, bool(executable))
    _place(objects / config_sha, tmp / Path(config_name).name, False)
    try:
        tmp.rename(tree)
    except OSError:
        if not tree.is_dir():
            raise
    return result


def _place(obj: Path, dest: Path, executable: bool) -> None:
    import shutil

    if not obj.is_file():
        raise RemoteError(f"remote-tree: object {obj.name} is missing; upload again")
    dest.parent.mkdir(parents=True, exist_ok=True)
    mode = 0o755 if executable else 0o644
    if stat.S_IMODE(obj.stat().st_mode) == mode:
        try:
            os.link(obj, dest)
            return
        except OSError:
            pass
    shutil.copyfile(obj, dest)
    dest.chmod(mode)
