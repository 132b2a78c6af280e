"""dethpc.core off-cluster (Dummy twins), on-cluster contexts and metrics.jsonl format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import dethpc.core as core
from dethpc.common.errors import DethpcError
from dethpc.core import (
    DummyCheckpointContext,
    DummyPreemptContext,
    DummySearcherContext,
    DummyTrainContext,
)
from dethpc.core._train import MetricsWriter, sanitize


def _trial(tmp_path: Path, *, target: dict | None = None, hparams: dict | None = None) -> Path:
    trial = tmp_path / "exp" / "trials" / "3"
    trial.mkdir(parents=True)
    (trial / "hparams.json").write_text(json.dumps(hparams or {"lr": 0.1, "nested": {"a": 1}}))
    if target is not None:
        (trial / "target.json").write_text(json.dumps(target))
    return trial


def test_off_cluster_gets_dummy_twins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    caplog.set_level("INFO")
    with core.init(env={}) as ctx:
        assert ctx.hparams == {}
        assert isinstance(ctx.train, DummyTrainContext)
        assert isinstance(ctx.checkpoint, DummyCheckpointContext)
        assert isinstance(ctx.preempt, DummyPreemptContext)
        assert isinstance(ctx.searcher, DummySearcherContext)
        assert ctx.distributed.rank == 0 and ctx.distributed.size == 1
        assert ctx.distributed.allgather(5) == [5] and ctx.distributed.broadcast("x") == "x"
        # as Determined's, off-cluster: info is None; dethpc's layers read job_info
        assert ctx.info is None
        assert ctx.job_info.trial_id is None and not ctx.job_info.on_cluster
        assert ctx.searcher.target_length is None
        assert ctx.preempt.should_preempt() is False
        ctx.train.report_training_metrics(1, {"loss": 1.0})  # logs, writes nothing
    logged = [json.loads(r.getMessage()) for r in caplog.records if '"kind"' in r.getMessage()]
    assert [(r["kind"], r["steps"], r["metrics"]) for r in logged] == \
        [("training", 1, {"loss": 1.0})]
    assert list(tmp_path.iterdir()) == []


def test_off_cluster_hparams_file(tmp_path: Path) -> None:
    f = tmp_path / "hp.json"
    f.write_text('{"lr": 0.5}')
    with core.init(env={"DETHPC_HPARAMS_FILE": str(f)}) as ctx:
        assert ctx.hparams == {"lr": 0.5}


def test_core_does_not_import_torch() -> None:
    code = "import sys, dethpc.core, dethpc.pytorch; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_on_cluster_info_hparams_and_searcher(tmp_path: Path) -> None:
    trial = _trial(tmp_path, target={"unit": "batches", "length": 400,
                                     "validate_at": [100, 25, 400]})
    env = {"DETHPC_TRIAL_DIR": str(trial), "DETHPC_TRIAL_ID": "3",
           "DETHPC_EXPERIMENT_ID": "7", "SLURM_RESTART_COUNT": "2", "DETHPC_TRIAL_SEED": "10"}
    with core.init(env=env) as ctx:
        assert ctx.hparams == {"lr": 0.1, "nested": {"a": 1}}
        assert (ctx.info.trial_id, ctx.info.experiment_id, ctx.info.run_id) == (3, 7, 2)
        assert ctx.info.trial_seed == 10 and ctx.info.latest_checkpoint is None
        assert ctx.searcher.target_length == 400 and ctx.searcher.unit == "batches"
        assert ctx.searcher.validate_at == (25, 100, 400)
        ops = []
        for op in ctx.searcher.operations():
            ops.append(op)
            op.report_progress(10)
            op.report_completed(0.5)
            with pytest.raises(DethpcError):
                op.report_completed(0.5)
        assert [op.length for op in ops] == [400]
        # as Determined's: the chief's loop fails when an operation was not completed
        with pytest.raises(DethpcError, match="report_completed"):
            list(ctx.searcher.operations())


def test_run_id_prefers_dethpc_run_id(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    env = {"DETHPC_TRIAL_DIR": str(trial), "DETHPC_RUN_ID": "4", "SLURM_RESTART_COUNT": "2"}
    with core.init(env=env) as ctx:
        assert ctx.info.run_id == 4


def test_bad_target_is_a_clear_error(tmp_path: Path) -> None:
    trial = _trial(tmp_path, target={"unit": "weeks", "length": 3})
    with pytest.raises(DethpcError, match="unit"), core.init(env={"DETHPC_TRIAL_DIR": str(trial)}):
        pass


@pytest.mark.parametrize(("raw", "wins"), [({}, False), ({"fit_length_wins": True}, True),
                                           ({"fit_length_wins": False}, False)])
def test_target_says_whether_fit_length_wins(tmp_path: Path, raw: dict, wins: bool) -> None:
    """``target.json``'s ``fit_length_wins`` (single, random, grid); absent: False, the
    searcher's length caps (an older daemon's file, ASHA)."""
    trial = _trial(tmp_path, target={"unit": "batches", "length": 8, **raw})
    with core.init(env={"DETHPC_TRIAL_DIR": str(trial)}) as ctx:
        assert ctx.searcher.target is not None
        assert ctx.searcher.target.fit_length_wins is wins


def test_a_fit_length_wins_that_is_no_bool_is_a_clear_error(tmp_path: Path) -> None:
    trial = _trial(tmp_path, target={"unit": "batches", "length": 8, "fit_length_wins": 1})
    with pytest.raises(DethpcError, match="fit_length_wins"), \
            core.init(env={"DETHPC_TRIAL_DIR": str(trial)}):
        pass


def test_metrics_jsonl_format(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    with core.init(env={"DETHPC_TRIAL_DIR": str(trial)}) as ctx:
        ctx.train.report_training_metrics(10, {"loss": 0.3})
        ctx.train.report_validation_metrics(25, {"validation_loss": 0.2, "acc": 1})
    raw = (trial / "metrics.jsonl").read_text()
    assert raw.endswith("\n")
    lines = [json.loads(line) for line in raw.splitlines()]
    assert [(r["kind"], r["steps"]) for r in lines] == [("training", 10), ("validation", 25)]
    assert lines[0]["metrics"] == {"loss": 0.3}
    assert lines[1]["metrics"] == {"validation_loss": 0.2, "acc": 1}
    assert all(isinstance(r["time"], float) for r in lines)


def test_non_finite_metrics_become_null(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "m.jsonl"
    MetricsWriter(path).write({"kind": "training", "steps": 1,
                               "metrics": {"loss": float("nan"), "x": float("inf"), "y": 1.5}})
    record = json.loads(path.read_text())  # strict JSON: parses
    assert record["metrics"] == {"loss": None, "x": None, "y": 1.5}
    assert "NaN" not in path.read_text() and "null" in path.read_text()
    assert "written as null" in caplog.text


def test_partial_last_line_gets_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"kind":"training","steps":1}\n{"kind":"train')  # writer died mid-line
    MetricsWriter(path).write({"kind": "validation", "steps": 2, "metrics": {}})
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["kind"] == "validation"
    assert lines[1] == '{"kind":"train'


def test_sanitize_numpy_and_errors() -> None:
    np = pytest.importorskip("numpy")
    assert sanitize({"a": np.float32(0.5), "b": np.int64(3), "c": np.array([1, 2])}) == \
        {"a": 0.5, "b": 3, "c": [1, 2]}
    with pytest.raises(DethpcError, match="cannot be written as JSON"):
        sanitize({"a": object()})


def test_steps_must_be_int(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    with core.init(env={"DETHPC_TRIAL_DIR": str(trial)}) as ctx:
        with pytest.raises(DethpcError, match="steps_completed"):
            ctx.train.report_training_metrics(1.5, {})  # type: ignore[arg-type]
        with pytest.raises(DethpcError, match="steps_completed"):
            ctx.train.report_validation_metrics(-1, {})


def test_non_chief_rank_writes_nothing(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    rank1 = core.DistributedContext(rank=1, size=2)
    with core.init(env={"DETHPC_TRIAL_DIR": str(trial)}, distributed=rank1,
                   preempt_mode=core.PreemptMode.ExplicitOnly) as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        with pytest.raises(DethpcError, match="only rank 0"), \
                ctx.checkpoint.store_path({"steps_completed": 1}):
            pass
    assert not (trial / "metrics.jsonl").exists() or not (trial / "metrics.jsonl").read_text()
