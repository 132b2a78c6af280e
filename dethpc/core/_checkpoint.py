"""Atomic checkpoints on a shared filesystem: store, verify, restore, find the latest.

Owns: the checkpoint directory format of docs/job-contract.md: files are written
into ``checkpoints/.tmp-<uuid>/``; on success every file is hashed (sha256) and
fsync'd, ``metadata.json`` is written last, and the directory is renamed to
``checkpoints/<uuid>`` (an atomic rename on POSIX filesystems), then a
``checkpoint`` record is appended to metrics.jsonl. A directory without
``metadata.json`` or with a file that does not match its checksum is never loaded.
Sharded checkpoints (``store_path(shard=True)``, Determined's): every rank gets the
same temporary directory (rank 0 picks the uuid and broadcasts it) and writes its own
files; the ranks then report ``ok`` or their error (an allgather), and only when
every rank succeeded does rank 0 hash, write ``metadata.json`` and rename. A rank
that raised makes every rank raise; a rank that died makes the collective fail; in
both cases nothing is published and the previous checkpoint stays the latest.
``delete(storage_id)`` (Determined's, rank 0): the directory is renamed to
``.deleted-<uuid>`` (from then on it is neither listed nor resumed from), a
``checkpoint_deleted`` record is appended to metrics.jsonl, then the files are removed.
Must not: import torch or know what the files hold (the Trainer does), or delete
checkpoints other than on the user's ``delete()`` (garbage collection belongs to the
daemon).
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import logging
import os
import shutil
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dethpc.common.errors import CheckpointNotFound, DethpcError
from dethpc.common.paths import CHECKPOINT_DELETED_PREFIX
from dethpc.core._distributed import DistributedContext
from dethpc.core._train import TrainContext, sanitize

log = logging.getLogger(__name__)

METADATA_FILE = "metadata.json"
TMP_PREFIX = ".tmp-"
#: a checkpoint being deleted (``CheckpointContext.delete``): hidden from ``list()``
DELETED_PREFIX = CHECKPOINT_DELETED_PREFIX
FORMAT_VERSION = 1


class DownloadMode(enum.Enum):
    """Determined's download modes. On a shared filesystem nothing is downloaded:
    every rank reads the checkpoint in place, whichever mode is given."""

    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


class CheckpointError(DethpcError):
    """A checkpoint is missing, incomplete or corrupt, or was used the wrong way."""


class CheckpointMissing(CheckpointError, CheckpointNotFound):
    """No checkpoint of that uuid here (Determined's ``det.errors.CheckpointNotFound``)."""


def sha256_file(path: Path, *, fsync: bool = False) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
        if fsync:
            os.fsync(fh.fileno())
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _payload_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


@dataclass(frozen=True)
class ShardReport:
    """What one rank says after writing its part of a sharded checkpoint."""

    rank: int
    error: str | None
    metadata: dict[str, Any]


def merge_metadata(reports: list[ShardReport]) -> dict[str, Any]:
    """The union of the ranks' metadata; ``CheckpointError`` when two ranks give one
    key different values (Determined refuses conflicting metadata too)."""
    merged: dict[str, Any] = {}
    owner: dict[str, int] = {}
    for report in reports:
        for key, value in report.metadata.items():
            if key in merged and merged[key] != value:
                raise CheckpointError(
                    f"sharded checkpoint metadata conflict: key {key!r} is {merged[key]!r} "
                    f"on rank {owner[key]} and {value!r} on rank {report.rank}; give each "
                    "key on one rank only, or the same value everywhere")
            merged.setdefault(key, value)
            owner.setdefault(key, report.rank)
    return merged


def shard_failures(reports: list[ShardReport]) -> str | None:
    """One line naming every rank that failed to write its shard, or None."""
    failed = [f"rank {r.rank}: {r.error}" for r in reports if r.error is not None]
    return "; ".join(failed) if failed else None


def upload_conflicts(per_rank: list[list[str]]) -> dict[str, list[int]]:
    """Relative paths that more than one rank would upload, with those ranks."""
    ranks: dict[str, list[int]] = {}
    for rank, rels in enumerate(per_rank):
        for rel in rels:
            ranks.setdefault(rel, []).append(rank)
    return {rel: rs for rel, rs in sorted(ranks.items()) if len(rs) > 1}


def steps_of(metadata: Mapping[str, Any]) -> int:
    """``metadata["steps_completed"]``; ``CheckpointError`` unless an int >= 0."""
    steps = metadata.get("steps_completed")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise CheckpointError("checkpoint metadata must include steps_completed "
                              f"(an int >= 0), got {steps!r}")
    return steps


@dataclass(frozen=True)
class CheckpointInfo:
    """What ``metadata.json`` says about one complete checkpoint."""

    uuid: str
    path: Path
    steps_completed: int
    time: float
    files: dict[str, str]
    metadata: dict[str, Any]


def read_metadata(path: Path) -> CheckpointInfo:
    """Parse ``<path>/metadata.json``; ``CheckpointError`` if absent or malformed."""
    meta_path = path / METADATA_FILE
    try:
        raw = json.loads(meta_path.read_text())
        files = raw["files"]
        steps = raw["steps_completed"]
        if not isinstance(files, dict) or not isinstance(steps, int):
            raise TypeError("files must be an object and steps_completed an int")
        return CheckpointInfo(uuid=path.name, path=path, steps_completed=steps,
                              time=float(raw.get("time", 0.0)), files=dict(files),
                              metadata=dict(raw.get("metadata") or {}))
    except FileNotFoundError as exc:
        raise CheckpointError(f"checkpoint {path} is incomplete: it has no {METADATA_FILE} "
                              "(the writer died before finishing it)") from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {path} has an unreadable {METADATA_FILE}: {exc}") \
            from exc


def verify(info: CheckpointInfo, selector: Callable[[str], bool] | None = None) -> None:
    """Check that every recorded file is there and that those ``selector`` picks (all
    by default) match their sha256; ``CheckpointError`` otherwise."""
    for rel in info.files:
        if not (info.path / rel).is_file():
            raise CheckpointError(f"checkpoint {info.path} is corrupt: file {rel} is missing")
    for rel, expected in info.files.items():
        if selector is not None and not selector(rel):
            continue
        file = info.path / rel
        actual = sha256_file(file)
        if actual != expected:
            raise CheckpointError(
                f"checkpoint {info.path} is corrupt: {rel} has sha256 {actual[:12]}..., "
                f"metadata.json recorded {expected[:12]}...; it will not be loaded "
                "(resume from an older checkpoint or delete this one)")


def _signature(info: CheckpointInfo) -> tuple[tuple[str, int, int], ...] | None:
    """Each recorded file's size and mtime (None when one is missing): what a verified
    checkpoint must still show to be taken as verified again without hashing."""
    out = []
    for rel in sorted(info.files):
        try:
            st = os.stat(info.path / rel)
        except OSError:
            return None
        out.append((rel, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _copy_out(src: Path, dst: Path, selector: Callable[[str], bool] | None) -> None:
    """``download``'s copy: the checkpoint's files ``selector`` chooses, and its
    ``metadata.json`` rewritten as Determined's (the user's metadata at the top level)."""
    for file in _payload_files(src):
        rel = file.relative_to(src).as_posix()
        if selector is not None and not selector(rel):
            continue
        if rel == METADATA_FILE:
            dst.mkdir(parents=True, exist_ok=True)
            (dst / rel).write_text(json.dumps(read_metadata(src).metadata, indent=2))
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, dst / rel)


class CheckpointContext:
    """``store_path`` / ``restore_path`` / ``latest`` over one checkpoint directory."""

    def __init__(self, directory: Path, dist: DistributedContext,
                 train: TrainContext | None = None) -> None:
        self.directory = directory
        self._dist = dist
        self._train = train
        #: uuid -> the files' signature when this process hashed them all: ``latest``
        #: then ``restore_path`` of the same checkpoint hashes it once, not twice
        self._verified: dict[str, tuple[tuple[str, int, int], ...]] = {}

    def _verify(self, info: CheckpointInfo,
                selector: Callable[[str], bool] | None = None) -> None:
        sig = _signature(info)
        if sig is not None and self._verified.get(info.uuid) == sig:
            return
        verify(info, selector)
        if selector is None and sig is not None:
            self._verified[info.uuid] = sig

    # ------------------------------------------------------------------ store
    @contextlib.contextmanager
    def store_path(self, metadata: Mapping[str, Any] | None = None, *,
                   shard: bool = False) -> Iterator[tuple[Path, str]]:
        """Yield ``(path, uuid)`` to write a checkpoint into; publish it on success.

        ``metadata`` must hold ``steps_completed`` (int, in the searcher's unit;
        Determined requires it too). Without ``shard`` only rank 0 may call this; if
        the block raises, the partial directory is removed and nothing is published.
        With ``shard=True`` every rank must call it (a collective): all get the same
        directory, each writes its own files (distinct names), the ranks' metadata are
        merged (``steps_completed`` given on at least one rank, no conflicting keys),
        and the checkpoint is published only when every rank's block succeeded;
        otherwise every rank raises and the previous checkpoint stays the latest.
        """
        if shard:
            with self._store_sharded(metadata) as out:
                yield out
            return
        if self._dist.rank != 0:
            raise CheckpointError(f"store_path() called on rank {self._dist.rank}: only rank 0 "
                                  "writes checkpoints; gather the state there first, or call "
                                  "store_path(shard=True) on every rank")
        metadata = {} if metadata is None else metadata
        if not isinstance(metadata, Mapping):
            raise CheckpointError(f"checkpoint metadata must be a dict, got {metadata!r}")
        steps = steps_of(metadata)
        user_meta = sanitize(dict(metadata), "checkpoint metadata")
        uuid = str(uuidlib.uuid4())
        tmp = self.directory / f"{TMP_PREFIX}{uuid}"
        tmp.mkdir(parents=True)
        try:
            yield tmp, uuid
            self._publish(tmp, uuid, steps, user_meta)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if self._train is not None:
            self._train.report_checkpoint(steps, uuid, user_meta)

    def _open_shared_tmp(self) -> tuple[Path, str]:
        """Rank 0 makes ``.tmp-<uuid>`` and broadcasts the uuid (or why it could not)."""
        told: tuple[str | None, str | None] = (None, None)
        if self._dist.rank == 0:
            uuid = str(uuidlib.uuid4())
            try:
                (self.directory / f"{TMP_PREFIX}{uuid}").mkdir(parents=True)
                told = (uuid, None)
            except OSError as exc:
                told = (None, f"rank 0 cannot create the checkpoint directory: {exc}")
        uuid_or_none, error = self._dist.broadcast(told)
        if uuid_or_none is None:
            raise CheckpointError(error or "no checkpoint directory")
        return self.directory / f"{TMP_PREFIX}{uuid_or_none}", uuid_or_none

    @contextlib.contextmanager
    def _store_sharded(self, metadata: Mapping[str, Any] | None
                       ) -> Iterator[tuple[Path, str]]:
        """``store_path(shard=True)``: three collectives on every rank, always in this
        order (broadcast uuid, allgather reports, broadcast verdict), whether the
        rank's block succeeded or raised, so that the ranks stay in step."""
        bad = None if metadata is None or isinstance(metadata, Mapping) else \
            f"checkpoint metadata must be a dict, got {metadata!r}"
        own = dict(metadata) if isinstance(metadata, Mapping) else {}
        tmp, uuid = self._open_shared_tmp()
        rank = self._dist.rank
        try:
            yield tmp, uuid
        except BaseException as exc:
            try:
                self._finish_sharded(tmp, uuid, ShardReport(rank, f"{type(exc).__name__}: "
                                                                  f"{exc}", {}))
            except DethpcError as other:
                log.warning("sharded checkpoint %s not published: %s", uuid, other)
            finally:
                if rank == 0:
                    shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._finish_sharded(tmp, uuid, ShardReport(rank, bad, own))

    def _finish_sharded(self, tmp: Path, uuid: str, mine: ShardReport) -> None:
        """Gather the reports, let rank 0 publish or refuse, tell every rank."""
        try:
            reports = self._dist.allgather(mine)
        except DethpcError:
            if self._dist.rank == 0:  # a rank died: its shard is missing, publish nothing
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        verdict: tuple[str | None, int, dict[str, Any]] = (None, 0, {})
        if self._dist.rank == 0:
            verdict = self._decide_sharded(tmp, uuid, reports)
        error, steps, user_meta = self._dist.broadcast(verdict)
        if error is not None:
            raise CheckpointError(f"sharded checkpoint {uuid} was not published: {error}")
        if self._train is not None:
            self._train.report_checkpoint(steps, uuid, user_meta)

    def _decide_sharded(self, tmp: Path, uuid: str, reports: list[ShardReport]
                        ) -> tuple[str | None, int, dict[str, Any]]:
        """Rank 0: publish when every rank succeeded and the metadata agree."""
        try:
            failed = shard_failures(reports)
            if failed is not None:
                raise CheckpointError(failed)
            merged = merge_metadata(reports)
            steps = steps_of(merged)
            user_meta = sanitize(merged, "checkpoint metadata")
            self._publish(tmp, uuid, steps, user_meta)
        except (DethpcError, OSError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            return str(exc), 0, {}
        return None, steps, user_meta

    def _publish(self, tmp: Path, uuid: str, steps: int, user_meta: dict[str, Any]) -> None:
        if (tmp / METADATA_FILE).exists():
            raise CheckpointError(f"{METADATA_FILE} is reserved for dethpc inside a checkpoint "
                                  "directory; save your metadata under another name or pass "
                                  "it as store_path(metadata)")
        files: dict[str, str] = {}
        for file in _payload_files(tmp):
            files[file.relative_to(tmp).as_posix()] = sha256_file(file, fsync=True)
        for sub in sorted({p.parent for p in _payload_files(tmp)} | {tmp}):
            _fsync_dir(sub)
        meta = {"format": FORMAT_VERSION, "uuid": uuid, "steps_completed": steps,
                "time": time.time(), "files": files, "metadata": user_meta}
        meta_tmp = tmp / (METADATA_FILE + ".part")
        with open(meta_tmp, "w") as fh:
            json.dump(meta, fh, indent=1, allow_nan=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(meta_tmp, tmp / METADATA_FILE)
        _fsync_dir(tmp)
        final = self.directory / uuid
        os.replace(tmp, final)
        _fsync_dir(self.directory)

    # ---------------------------------------------------------------- restore
    def info(self, uuid: str) -> CheckpointInfo:
        """What ``metadata.json`` says about checkpoint ``uuid`` (unverified)."""
        return read_metadata(self._path_of(uuid))

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        """The metadata given to ``store_path``/``upload`` (with ``steps_completed``),
        as Determined's ``get_metadata(storage_id)`` returns it."""
        info = self.info(storage_id)
        return {**info.metadata, "steps_completed": info.steps_completed}

    def delete(self, storage_id: str) -> None:
        """Delete checkpoint ``storage_id`` of this trial (Determined's ``delete``; rank 0
        only, as every write of the run directory). It is renamed to
        ``.deleted-<uuid>`` first, so that no run resumes from it (nor from what is left
        if the process dies while removing it), then a ``checkpoint_deleted`` record tells
        the daemon, then its files are removed."""
        if self._dist.rank != 0:
            raise CheckpointError(f"delete() called on rank {self._dist.rank}: only rank 0 "
                                  "deletes checkpoints (as only it writes them)")
        path = self._path_of(storage_id)
        gone = self.directory / f"{DELETED_PREFIX}{storage_id}"
        os.replace(path, gone)
        _fsync_dir(self.directory)
        self._verified.pop(storage_id, None)
        if self._train is not None:
            self._train.report_checkpoint_deleted(storage_id)
        shutil.rmtree(gone, ignore_errors=True)

    def upload(self, ckpt_dir: str | os.PathLike[str] | None,
               metadata: Mapping[str, Any] | None = None, *, shard: bool = False,
               selector: Callable[[str], bool] | None = None) -> str:
        """Copy ``ckpt_dir`` into a new checkpoint; its uuid (Determined's ``upload``).

        ``selector(relpath)`` chooses the files to copy. Rank 0 only, like
        ``store_path``; with ``shard=True`` every rank calls it with its own directory
        (or ``None``: nothing from this rank) and a path that two ranks would both
        upload is refused on every rank before anything is written.
        """
        if ckpt_dir is None and not shard:
            raise CheckpointError("upload(ckpt_dir=None) would store nothing; give a directory")
        src = None if ckpt_dir is None else Path(ckpt_dir)
        if src is not None and not src.is_dir():
            # a collective follows with shard=True: report it there, not by leaving early
            if not shard:
                raise CheckpointError(f"upload(): {src} is not a directory")
        rels = [] if src is None or not src.is_dir() else [
            rel for rel in (f.relative_to(src).as_posix() for f in _payload_files(src))
            if rel != METADATA_FILE and (selector is None or selector(rel))]
        if shard:
            problem = None if src is None or src.is_dir() else f"{src} is not a directory"
            gathered = self._dist.allgather((problem, rels))
            problems = [f"rank {r}: {p}" for r, (p, _) in enumerate(gathered) if p]
            if problems:
                raise CheckpointError(f"upload(shard=True): {'; '.join(problems)}")
            conflicts = upload_conflicts([names for _, names in gathered])
            if conflicts:
                rel, ranks = next(iter(conflicts.items()))
                raise CheckpointError(
                    f"upload(shard=True): {len(conflicts)} file(s) would be uploaded by more "
                    f"than one rank, e.g. {rel!r} by ranks {ranks}; each rank must upload "
                    "distinct files (use selector=)")
        with self.store_path(metadata, shard=shard) as (path, uuid):
            for rel in rels:
                assert src is not None
                (path / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src / rel, path / rel)
        return uuid

    def download(self, storage_id: str, ckpt_dir: str | os.PathLike[str],
                 download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload, *,
                 selector: Callable[[str], bool] | None = None) -> None:
        """Copy a verified checkpoint's files into ``ckpt_dir`` (created if absent), and,
        as Determined's (unless ``selector`` leaves it out), a ``metadata.json`` holding
        the checkpoint's metadata as Determined writes it: the keys given to
        ``upload``/``store_path`` (``steps_completed`` among them) at the top level, not
        dethpc's own record of the checkpoint (its files' checksums)."""
        DownloadMode(download_mode)
        with self.restore_path(storage_id) as src:
            _copy_out(src, Path(ckpt_dir), selector)

    def _path_of(self, uuid: str) -> Path:
        if not isinstance(uuid, str) or not uuid or "/" in uuid or uuid.startswith("."):
            raise CheckpointMissing(f"{uuid!r} is not a checkpoint uuid")
        path = self.directory / uuid
        if not path.is_dir():
            raise CheckpointMissing(f"checkpoint {uuid} not found in {self.directory}")
        return path

    @contextlib.contextmanager
    def restore_path(self, storage_id: str,
                     download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload, *,
                     selector: Callable[[str], bool] | None = None) -> Iterator[Path]:
        """Yield the directory of a complete, checksum-verified checkpoint.

        Any rank may call it, alone or together (no collective). The checkpoint is
        read in place on the shared filesystem: ``download_mode`` (Determined's)
        changes nothing, every file is there. ``selector`` (Determined's: the files
        this rank will read) limits the checksums to those files, so ranks that read
        only their own shard do not each hash the whole checkpoint; every recorded
        file must still be present. A checkpoint this process already verified whole
        (``latest`` does) is not hashed again while its files' sizes and mtimes are
        unchanged.
        """
        DownloadMode(download_mode)
        info = read_metadata(self._path_of(storage_id))
        self._verify(info, selector)
        yield info.path

    def list(self) -> list[CheckpointInfo]:
        """Complete-looking checkpoints (metadata.json readable), oldest first; unverified."""
        if not self.directory.is_dir():
            return []
        found: list[CheckpointInfo] = []
        for entry in self.directory.iterdir():
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            try:
                found.append(read_metadata(entry))
            except CheckpointError as exc:
                log.warning("skipping checkpoint %s: %s", entry.name, exc)
        return sorted(found, key=lambda c: (c.steps_completed, c.time))

    def latest(self) -> str | None:
        """uuid of the verified checkpoint with the most steps (latest time on ties).

        Evaluated on rank 0 and broadcast, so every rank resumes from the same one.
        """
        answer: str | None = None
        if self._dist.rank == 0:
            for info in reversed(self.list()):
                try:
                    self._verify(info)
                except CheckpointError as exc:
                    log.warning("skipping checkpoint %s: %s", info.uuid, exc)
                    continue
                answer = info.uuid
                break
        return self._dist.broadcast(answer)


class DummyCheckpointContext(CheckpointContext):
    """Off-cluster twin: checkpoints go to a directory of the caller's choice.

    Built as Determined's, ``DummyCheckpointContext(dist, storage_manager)``, where the
    storage manager is a directory (a path, or an object with Determined's shared-file
    system manager's ``_base_path``), or with dethpc's keyword ``directory=``. By default
    a ``checkpoints/`` folder under the current directory, created on first store;
    nothing is reported anywhere.
    """

    def __init__(self, dist: DistributedContext | None = None,
                 storage_manager: Any = None, *, directory: Path | None = None) -> None:
        if dist is not None and not isinstance(dist, DistributedContext):
            raise DethpcError(f"DummyCheckpointContext(dist, storage_manager): dist must be a "
                              f"DistributedContext, got {type(dist).__name__} (a directory "
                              "is passed as storage_manager or directory=)")
        if storage_manager is not None:
            if directory is not None:
                raise DethpcError("DummyCheckpointContext: give storage_manager or directory=,"
                                  " not both")
            directory = _storage_directory(storage_manager)
        super().__init__(directory or Path.cwd() / "checkpoints", dist or DistributedContext())


def _storage_directory(storage_manager: Any) -> Path:
    """The directory a Determined-style storage manager argument stands for."""
    if isinstance(storage_manager, str | os.PathLike):
        return Path(storage_manager)
    base = getattr(storage_manager, "_base_path", None)
    if isinstance(base, str | os.PathLike):
        return Path(base)
    raise DethpcError(f"DummyCheckpointContext: storage_manager {storage_manager!r} is not a "
                      "directory; dethpc stores off-cluster checkpoints in a directory: pass "
                      "its path")
