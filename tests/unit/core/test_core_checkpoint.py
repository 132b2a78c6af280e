"""Checkpoint atomicity: tmp dirs, missing metadata.json and tampered files are never loaded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dethpc.core import CheckpointContext, CheckpointError, DistributedContext, TrainContext
from dethpc.core._train import MetricsWriter


def _ctx(tmp_path: Path) -> CheckpointContext:
    dist = DistributedContext()
    train = TrainContext(MetricsWriter(tmp_path / "metrics.jsonl"), dist)
    return CheckpointContext(tmp_path / "checkpoints", dist, train)


def _store(ctx: CheckpointContext, steps: int, payload: bytes = b"w") -> str:
    with ctx.store_path({"steps_completed": steps, "note": "hi"}) as (path, uuid):
        (path / "model.bin").write_bytes(payload)
        (path / "sub").mkdir()
        (path / "sub" / "opt.bin").write_bytes(payload * 2)
        assert path.name == f".tmp-{uuid}"
        assert not (ctx.directory / uuid).exists()  # not visible while being written
    return uuid


def test_store_writes_metadata_last_and_reports(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    uuid = _store(ctx, 5)
    final = ctx.directory / uuid
    meta = json.loads((final / "metadata.json").read_text())
    assert meta["steps_completed"] == 5 and meta["uuid"] == uuid
    assert set(meta["files"]) == {"model.bin", "sub/opt.bin"}
    assert meta["metadata"] == {"steps_completed": 5, "note": "hi"}
    assert isinstance(meta["time"], float)
    assert not list(ctx.directory.glob(".tmp-*"))
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["kind"] == "checkpoint" and record["uuid"] == uuid and record["steps"] == 5
    assert ctx.latest() == uuid
    with ctx.restore_path(uuid) as path:
        assert (path / "model.bin").read_bytes() == b"w"


def test_failed_store_leaves_nothing(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    with pytest.raises(RuntimeError), ctx.store_path({"steps_completed": 1}) as (path, _):
        (path / "x").write_text("partial")
        raise RuntimeError("boom")
    assert list(ctx.directory.iterdir()) == []
    assert ctx.latest() is None
    assert not (tmp_path / "metrics.jsonl").exists() or "checkpoint" not in \
        (tmp_path / "metrics.jsonl").read_text()


def test_metadata_requires_steps_completed(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    with pytest.raises(CheckpointError, match="steps_completed"), ctx.store_path({}):
        pass


def test_metadata_json_is_reserved(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    with pytest.raises(CheckpointError, match="reserved"), \
            ctx.store_path({"steps_completed": 1}) as (path, _):
        (path / "metadata.json").write_text("{}")
    assert ctx.latest() is None


def test_tmp_dir_is_skipped(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    good = _store(ctx, 10)
    tmp = ctx.directory / ".tmp-deadbeef"
    tmp.mkdir()
    (tmp / "metadata.json").write_text(json.dumps({"steps_completed": 99, "files": {}}))
    assert ctx.latest() == good


def test_dir_without_metadata_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ctx = _ctx(tmp_path)
    good = _store(ctx, 10)
    newer = _store(ctx, 20)
    os.remove(ctx.directory / newer / "metadata.json")
    assert ctx.latest() == good
    assert "no metadata.json" in caplog.text
    with pytest.raises(CheckpointError, match="incomplete"), ctx.restore_path(newer):
        pass


def test_tampered_file_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ctx = _ctx(tmp_path)
    good = _store(ctx, 10)
    bad = _store(ctx, 20)
    (ctx.directory / bad / "sub" / "opt.bin").write_bytes(b"tampered")
    assert ctx.latest() == good
    assert "corrupt" in caplog.text
    with pytest.raises(CheckpointError, match="corrupt.*sub/opt.bin"), ctx.restore_path(bad):
        pass


def test_missing_file_is_corrupt(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    bad = _store(ctx, 20)
    os.remove(ctx.directory / bad / "model.bin")
    assert ctx.latest() is None
    with pytest.raises(CheckpointError, match="missing"), ctx.restore_path(bad):
        pass


def test_latest_is_highest_steps_then_latest_time(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    a = _store(ctx, 30)
    _store(ctx, 10)
    assert ctx.latest() == a
    b = _store(ctx, 30)  # same steps, later time
    assert ctx.latest() == b


def test_unknown_uuid(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    for bad in ("nope", "../x", ".tmp-x", ""):
        with pytest.raises(CheckpointError), ctx.restore_path(bad):
            pass


def _count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import dethpc.core._checkpoint as ck

    hashed: list[str] = []
    real = ck.sha256_file

    def counting(path: Path, **kw: bool) -> str:
        hashed.append(path.name)
        return real(path, **kw)

    monkeypatch.setattr(ck, "sha256_file", counting)
    return hashed


def test_latest_then_restore_hashes_the_checkpoint_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path)
    uuid = _store(ctx, 5)
    hashed = _count_hashes(monkeypatch)
    assert ctx.latest() == uuid
    with ctx.restore_path(uuid) as path:
        assert (path / "model.bin").read_bytes() == b"w"
    assert sorted(hashed) == ["model.bin", "opt.bin"]
    # a file changed since (its mtime moves): verified again, and refused
    (ctx.directory / uuid / "model.bin").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="corrupt.*model.bin"), ctx.restore_path(uuid):
        pass


def test_a_selector_limits_the_checksums_to_the_files_it_picks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uuid = _store(_ctx(tmp_path), 5)
    ctx = _ctx(tmp_path)                       # another rank's process: nothing verified
    hashed = _count_hashes(monkeypatch)
    with ctx.restore_path(uuid, selector=lambda rel: rel == "model.bin"):
        pass
    assert hashed == ["model.bin"]
    # the picked file is still checked, and every file must be there
    (ctx.directory / uuid / "model.bin").write_bytes(b"tampered")
    with pytest.raises(CheckpointError, match="corrupt.*model.bin"), \
            ctx.restore_path(uuid, selector=lambda rel: rel == "model.bin"):
        pass
    os.remove(ctx.directory / uuid / "sub" / "opt.bin")
    with pytest.raises(CheckpointError, match="sub/opt.bin is missing"), \
            ctx.restore_path(uuid, selector=lambda rel: rel == "sub/nothing"):
        pass
