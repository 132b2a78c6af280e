"""Sharded checkpoints (``store_path(shard=True)``, ``upload(shard=True)``) across real
processes over the TCP star: every rank writes its own files into one directory and
the checkpoint is published only when every rank succeeded; a rank that raises or
dies leaves the previous checkpoint as the latest."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from dethpc.core import CheckpointContext, DistributedContext, TrainContext
from dethpc.core._checkpoint import (
    METADATA_FILE,
    TMP_PREFIX,
    CheckpointError,
    ShardReport,
    merge_metadata,
    upload_conflicts,
)
from dethpc.core._train import MetricsWriter

SIZE = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _context(rank: int, port: int, root: Path) -> CheckpointContext:
    dist = DistributedContext(rank=rank, size=SIZE, local_rank=rank, local_size=SIZE,
                              env={"DETHPC_CORE_PORT": str(port),
                                   "DETHPC_CORE_CONNECT_TIMEOUT": "30"})
    return CheckpointContext(root / "ck", dist, TrainContext(MetricsWriter(root / "m.jsonl"),
                                                             dist))


def _store(ckpt: CheckpointContext, rank: int, steps: int, *, fail: int | None = None,
           die: int | None = None, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """One sharded store; what this rank saw."""
    given = dict(meta) if meta is not None else (
        {"steps_completed": steps} if rank == 0 else {f"rank{rank}": True})
    try:
        with ckpt.store_path(given, shard=True) as (path, uuid):
            (path / f"shard_{rank}.bin").write_bytes(bytes([rank]) * 100)
            if rank == die:
                os._exit(7)  # a rank that dies in the middle of its shard
            if rank == fail:
                raise RuntimeError("disk full on this rank")
        return {"uuid": uuid, "path": str(path)}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        return {"error": f"{type(exc).__name__}: {exc}"}


def _rank_main(rank: int, port: int, root: str, scenario: str, out: Any) -> None:
    ckpt = _context(rank, port, Path(root))
    seen: dict[str, Any] = {"rank": rank}
    try:
        seen["first"] = _store(ckpt, rank, 5)
        if scenario == "fail":
            seen["second"] = _store(ckpt, rank, 10, fail=1)
        elif scenario == "die":
            seen["second"] = _store(ckpt, rank, 10, die=2)
        elif scenario == "conflict":
            seen["second"] = _store(ckpt, rank, 10, meta={"steps_completed": 10 + rank})
        elif scenario == "upload":
            src = Path(root) / f"src{rank}"
            src.mkdir()
            (src / f"part{rank}.txt").write_text(str(rank))
            (src / "common.txt").write_text("same name on every rank")
            meta = {"steps_completed": 10} if rank == 0 else None
            try:
                ckpt.upload(src, meta, shard=True)
                seen["conflict"] = "uploaded"
            except CheckpointError as exc:
                seen["conflict"] = str(exc)
            seen["upload"] = ckpt.upload(src, meta, shard=True,
                                         selector=lambda rel: rel != "common.txt")
        latest = ckpt.latest()
        seen["latest"] = latest
        with ckpt.restore_path(latest or "none") as path:
            seen["restored"] = sorted(p.name for p in path.iterdir())
    except Exception as exc:  # noqa: BLE001 - reported to the test
        seen["crash"] = f"{type(exc).__name__}: {exc}"
    out.put(seen)


def _run(tmp_path: Path, scenario: str, ranks: int = SIZE) -> dict[int, dict[str, Any]]:
    port = _free_port()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, port, str(tmp_path), scenario, out))
             for r in range(SIZE)]
    for p in procs:
        p.start()
    results = [out.get(timeout=90) for _ in range(ranks)]
    for p in procs:
        p.join(timeout=30)
    return {r["rank"]: r for r in results}


def _metrics(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]


def test_every_rank_writes_its_shard_into_one_published_checkpoint(tmp_path: Path) -> None:
    seen = _run(tmp_path, "ok")
    uuids = {s["first"]["uuid"] for s in seen.values()}
    assert len(uuids) == 1, seen                                  # one directory for all
    uuid = uuids.pop()
    assert {s["first"]["path"] for s in seen.values()} == {str(tmp_path / "ck" /
                                                               f"{TMP_PREFIX}{uuid}")}
    meta = json.loads((tmp_path / "ck" / uuid / METADATA_FILE).read_text())
    assert sorted(meta["files"]) == ["shard_0.bin", "shard_1.bin", "shard_2.bin"]
    assert meta["steps_completed"] == 5
    assert meta["metadata"] == {"steps_completed": 5, "rank1": True, "rank2": True}
    for rank, s in seen.items():                                  # every rank restores it
        assert s["latest"] == uuid and "crash" not in s, (rank, s)
        assert s["restored"] == [METADATA_FILE, "shard_0.bin", "shard_1.bin", "shard_2.bin"]
    assert [r["uuid"] for r in _metrics(tmp_path) if r["kind"] == "checkpoint"] == [uuid]
    assert not list((tmp_path / "ck").glob(f"{TMP_PREFIX}*"))


def test_a_rank_that_raises_publishes_nothing_on_any_rank(tmp_path: Path) -> None:
    seen = _run(tmp_path, "fail")
    first = seen[0]["first"]["uuid"]
    assert "disk full on this rank" in seen[1]["second"]["error"]  # its own exception
    for rank in (0, 2):
        err = seen[rank]["second"]["error"]
        assert err.startswith("CheckpointError: sharded checkpoint") and \
            "rank 1: RuntimeError: disk full on this rank" in err, (rank, err)
    assert all(s["latest"] == first for s in seen.values()), seen  # previous stays latest
    assert [p.name for p in (tmp_path / "ck").iterdir()] == [first]
    assert len([r for r in _metrics(tmp_path) if r["kind"] == "checkpoint"]) == 1


def test_a_rank_that_dies_mid_shard_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    seen = _run(tmp_path, "die", ranks=SIZE - 1)                 # rank 2 never reports
    assert 2 not in seen
    first = seen[0]["first"]["uuid"]
    assert "closed the connection" in seen[0]["second"]["error"], seen[0]
    # the chief closes the broken star: rank 1 fails too, never reads a later message
    assert "rank 0 closed the connection" in seen[1]["second"]["error"], seen[1]
    assert "closed" in seen[1]["crash"] and "broken" in seen[0]["crash"], seen
    assert [p.name for p in (tmp_path / "ck").iterdir()] == [first]  # partial one removed
    fresh = CheckpointContext(tmp_path / "ck", DistributedContext())
    assert fresh.latest() == first


def test_conflicting_metadata_is_refused_everywhere(tmp_path: Path) -> None:
    seen = _run(tmp_path, "conflict")
    for rank, s in seen.items():
        assert "'steps_completed' is 10 on rank 0 and 11 on rank 1" in s["second"]["error"], \
            (rank, s)
    assert [p.name for p in (tmp_path / "ck").iterdir()] == [seen[0]["first"]["uuid"]]


def test_sharded_upload_refuses_shared_names_and_merges_distinct_ones(tmp_path: Path) -> None:
    seen = _run(tmp_path, "upload")
    for rank, s in seen.items():
        assert "'common.txt' by ranks [0, 1, 2]" in s["conflict"], (rank, s)
        assert s["latest"] == s["upload"] == seen[0]["upload"], (rank, s)
        assert s["restored"] == [METADATA_FILE, "part0.txt", "part1.txt", "part2.txt"]


def test_shard_with_one_process_and_the_pure_helpers(tmp_path: Path) -> None:
    ckpt = CheckpointContext(tmp_path / "ck", DistributedContext())
    with ckpt.store_path({"steps_completed": 2}, shard=True) as (path, uuid):
        (path / "x").write_text("x")
    assert ckpt.latest() == uuid
    with pytest.raises(CheckpointError, match="steps_completed"), \
            ckpt.store_path({"note": 1}, shard=True) as (path, _):
        (path / "y").write_text("y")
    assert ckpt.latest() == uuid and len(list((tmp_path / "ck").iterdir())) == 1
    assert merge_metadata([ShardReport(0, None, {"a": 1}), ShardReport(1, None, {"a": 1,
                                                                                "b": 2})]) \
        == {"a": 1, "b": 2}
    assert upload_conflicts([["a", "b"], ["b"], ["c", "b"]]) == {"b": [0, 1, 2]}
    with pytest.raises(CheckpointError, match="upload"):
        ckpt.upload(tmp_path / "missing", {"steps_completed": 3}, shard=True)
