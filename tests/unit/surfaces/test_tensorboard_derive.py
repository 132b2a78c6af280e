"""TensorBoard's derivation, pure parts (``dethpc.surfaces.tasks.derive``,
``dethpc.surfaces.tasks``):
records to one series per metric (first write per step wins), the serving process's
source argument, the socket path's fallback, the ``--slurm`` job script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dethpc.surfaces.tasks.derive import Source, mirror, read_records, series
from dethpc.surfaces.tasks.registry import MAX_SOCKET_PATH, socket_path
from dethpc.surfaces.tasks.tensorboard import job_script


def rec(kind: str, steps: object, t: float = 0.0, **metrics: object) -> dict[str, object]:
    return {"kind": kind, "steps": steps, "metrics": metrics, "time": t}


@pytest.mark.parametrize("records, expected", [
    ([], {}),
    ([rec("training", 1, 10, loss=1.0), rec("training", 2, 11, loss=0.5)],
     {"training/loss": [(1, 1.0, 10), (2, 0.5, 11)]}),
    # a requeue resumed from an older checkpoint repeats steps 2..3: the first value stays
    ([rec("training", 1, 1, loss=3.0), rec("training", 2, 2, loss=2.0),
      rec("training", 3, 3, loss=1.0), rec("training", 2, 9, loss=7.0),
      rec("training", 3, 10, loss=8.0), rec("training", 4, 11, loss=0.5)],
     {"training/loss": [(1, 3.0, 1), (2, 2.0, 2), (3, 1.0, 3), (4, 0.5, 11)]}),
    # out of order in the file: sorted by step
    ([rec("validation", 5, 1, validation_loss=0.2), rec("validation", 2, 2, validation_loss=0.4)],
     {"validation/validation_loss": [(2, 0.4, 2), (5, 0.2, 1)]}),
    # non-numbers, booleans, NaN and other kinds are left out; ints become floats
    ([rec("training", 1, 0, loss="x", ok=True, nan=float("nan"), n=3),
      rec("checkpoint", 1, 0, loss=1.0), {"kind": "training", "steps": "bad"}],
     {"training/n": [(1, 3.0, 0)]}),
    ([rec("training", 1, 0, a=1.0, b=2.0), rec("validation", 1, 0, a=5.0)],
     {"training/a": [(1, 1.0, 0)], "training/b": [(1, 2.0, 0)],
      "validation/a": [(1, 5.0, 0)]}),
])
def test_series(records: list[dict[str, object]],
                expected: dict[str, list[tuple[int, float, float]]]) -> None:
    assert series(records) == expected


def test_read_records_skips_a_torn_last_line_and_junk(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"kind": "training", "steps": 1}\nnot json\n[1]\n{"kind": "trai')
    records, offset = read_records(path)
    assert records == [{"kind": "training", "steps": 1}]
    assert offset == len(path.read_bytes()) - len('{"kind": "trai')
    with open(path, "a") as f:
        f.write('ning", "steps": 2}\n')
    assert read_records(path, offset) == ([{"kind": "training", "steps": 2}],
                                          len(path.read_bytes()))
    assert read_records(tmp_path / "missing", 5) == ([], 5)


@pytest.mark.parametrize("source", [
    Source(3, Path("/runs/a:b/exp 3"), "batches"),
    Source(4, Path("/r"), "epochs", frozenset({7, 9})),
])
def test_source_argument_round_trips(source: Source) -> None:
    assert Source.from_arg(source.to_arg()) == source


@pytest.mark.parametrize("length, fallback", [(10, False), (MAX_SOCKET_PATH + 20, True)])
def test_socket_path_falls_back_to_a_short_private_dir(tmp_path: Path, length: int,
                                                      fallback: bool) -> None:
    work = tmp_path / ("d" * max(1, length - len(str(tmp_path)) - 20))
    path = socket_path(99999, work, "tb.sock")
    assert len(str(path)) <= MAX_SOCKET_PATH or not fallback
    assert (path.parent != work) == fallback
    if fallback:
        assert path.parent.stat().st_mode & 0o777 == 0o700
        assert path.parent.parent.stat().st_mode & 0o777 == 0o700
        path.parent.rmdir()


def test_job_script_runs_the_server_with_a_private_umask(tmp_path: Path) -> None:
    text = job_script(["python", "-m", "dethpc.surfaces.tasks.tbserve", "--socket", "/a b/s"],
                      tmp_path, "debug")
    assert text.startswith("#!/bin/bash\n")
    assert "#SBATCH --partition=debug" in text and "#SBATCH --output=" in text
    assert "umask 077" in text
    assert text.rstrip().endswith("exec python -m dethpc.surfaces.tasks.tbserve --socket '/a b/s'")


def test_mirror_copies_what_each_file_grew_by(tmp_path: Path) -> None:
    """The trial's own tensorboard/ files (get_tensorboard_path) reach the served logdir:
    appended bytes only, a rewritten (shorter) file again whole, links left out."""
    src, dest, copied = tmp_path / "tb", tmp_path / "logs" / "tensorboard", {}
    assert mirror(src, dest, copied) == 0 and not dest.exists()     # none yet
    (src / "sub").mkdir(parents=True)
    (src / "events.1").write_bytes(b"abc")
    (src / "sub" / "events.2").write_bytes(b"xy")
    (src / "link").symlink_to(src / "events.1")
    assert mirror(src, dest, copied) == 5
    with open(src / "events.1", "ab") as f:
        f.write(b"def")
    assert mirror(src, dest, copied) == 3                # only what was appended
    assert mirror(src, dest, copied) == 0
    (src / "sub" / "events.2").write_bytes(b"z")          # rewritten shorter
    assert mirror(src, dest, copied) == 1
    assert (dest / "events.1").read_bytes() == b"abcdef"
    assert (dest / "sub" / "events.2").read_bytes() == b"z"
    assert not (dest / "link").exists()


def test_deriver_serves_a_trials_own_tensorboard_files_beside_the_derived(
        tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from dethpc.surfaces.tasks.derive import Deriver

    trial = tmp_path / "run" / "trials" / "4"
    (trial / "tensorboard").mkdir(parents=True)
    (trial / "metrics.jsonl").write_text(json.dumps(rec("training", 1, 1.0, loss=1.0)) + "\n")
    (trial / "tensorboard" / "events.out.tfevents.1.n1").write_bytes(b"user")
    deriver = Deriver(tmp_path / "logs", [Source(7, tmp_path / "run", "batches")])
    try:
        assert deriver.refresh() == 1
    finally:
        deriver.close()
    run = tmp_path / "logs" / "exp7" / "trial4"
    assert (run / "tensorboard" / "events.out.tfevents.1.n1").read_bytes() == b"user"
    assert [p.name for p in run.glob("events.out.tfevents.*")]   # the derived run beside
