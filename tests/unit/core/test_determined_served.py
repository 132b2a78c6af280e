"""What dethpc serves of Determined's API, served differently on Slurm: the behaviour each
line of ``dethpc.core.determined_rules`` promises, where a unit test can see it
(``test_determined_surface.py`` checks that the names exist and take the same calls).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import dethpc
import dethpc.core as core
from dethpc.common import slots, util
from dethpc.common.errors import CheckpointNotFound, DethpcError, InvalidHP
from dethpc.common.exitcodes import EXIT_STOPPED
from dethpc.core import DistributedContext, EarlyExitReason, PreemptMode, TensorboardMode
from dethpc.core._preempt import PreemptContext
from dethpc.core._train import best_validation
from dethpc.launch import detenv


def _trial(tmp_path: Path, trial_id: int = 7, config: str = "") -> Path:
    trial = tmp_path / "exp" / "trials" / str(trial_id)
    trial.mkdir(parents=True)
    (trial / "hparams.json").write_text(json.dumps({"lr": 0.5}))
    (tmp_path / "exp" / "config.yaml").write_text(
        config or "searcher: {name: single, metric: loss, smaller_is_better: true}\n")
    return trial


def _env(trial: Path, **extra: str) -> dict[str, str]:
    return {"DETHPC_TRIAL_DIR": str(trial), "DETHPC_TRIAL_ID": trial.name,
            "DETHPC_EXPERIMENT_ID": "2", "DETHPC_TRIAL_SEED": "9", **extra}


def _records(trial: Path) -> list[dict[str, Any]]:
    path = trial / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# ------------------------------------------------------------ ClusterInfo
@pytest.mark.parametrize(("env", "slot_ids", "counts", "uuids"), [
    ({}, [0], [1], []),                                                  # one CPU slot
    ({"SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_NODEID": "1"}, [0, 1, 2, 3], [4, 4], []),
    ({"SLURM_TASKS_PER_NODE": "2,1", "SLURM_NODEID": "1"}, [0], [2, 1], []),
    ({"SLURM_JOB_GPUS": "2,3", "SLURM_TASKS_PER_NODE": "2"}, [2, 3], [2], None),
    ({"SLURM_STEP_GPUS": "1", "SLURM_JOB_GPUS": "0,1"}, [1], [1], None),   # a step's task
    ({"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}, [0, 1], [2], ["GPU-a", "GPU-b"]),
    ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, [0], [1], []),
    ({"LOCAL_WORLD_SIZE": "3"}, [0, 1, 2], [3], []),
])
def test_slots_from_slurms_environment(env: dict[str, str], slot_ids: list[int],
                                       counts: list[int], uuids: list[str] | None) -> None:
    assert slots.slot_ids(env) == slot_ids
    assert slots.slot_counts(env) == counts
    assert slots.gpu_uuids(env) == uuids


@pytest.mark.parametrize(("spec", "counts"), [
    ("2(x3),1", [2, 2, 2, 1]), ("4", [4]), ("1,2(x2)", [1, 2, 2]), ("", []), ("x", []),
])
def test_tasks_per_node(spec: str, counts: list[int]) -> None:
    assert slots.tasks_per_node(spec) == counts


def test_cluster_info_fields_in_a_trial(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    info = core.get_cluster_info(env=_env(
        trial, SLURMD_NODENAME="gpu03", SLURM_CLUSTER_NAME="hpc", SLURM_JOB_GPUS="0,1",
        SLURM_TASKS_PER_NODE="2(x2)", SLURM_JOB_NODELIST="gpu[03-04]", SLURM_NODEID="0",
        CUDA_VISIBLE_DEVICES="GPU-x,GPU-y", DET_STEPS_COMPLETED="12", DETHPC_RUN_ID="0"))
    assert info is not None
    assert (info.agent_id, info.cluster_id, info.slot_ids, info.container_slot_counts) == (
        "gpu03", "hpc", [0, 1], [2, 2])
    assert info.container_addrs == ["gpu03", "gpu04"] and info.container_rank == 0
    assert (info.master_url, info.session_token, info.master_cert_name,
            info.master_cert_file) == ("", "", None, None)
    assert (info.task_id, info.allocation_id) == ("2.7", "2.7.1")
    assert info.trial._steps_completed == 12 and info.trial._trial_run_id == 1


def test_gpu_uuids_asks_nvidia_smi_once_and_gives_empty_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dethpc.core._info as info_mod

    asked: list[list[str]] = []
    original = info_mod.query_gpu_uuids
    monkeypatch.setattr(info_mod, "query_gpu_uuids", lambda d: asked.append(d) or ["GPU-z"])
    info = core.get_cluster_info(env=_env(_trial(tmp_path), SLURM_JOB_GPUS="5"))
    assert info is not None and info.gpu_uuids == ["GPU-z"] == info.gpu_uuids
    assert asked == [["5"]]
    monkeypatch.setenv("PATH", str(tmp_path))          # no nvidia-smi anywhere
    assert original(["0"]) == []


# ------------------------------------------------------- local collectives
class _Scripted(DistributedContext):
    """One rank of 4 (2 nodes x 2): allgather returns what every rank would send."""

    def __init__(self, rank: int) -> None:
        super().__init__(rank=rank, size=4, local_rank=rank % 2, local_size=2,
                         cross_rank=rank // 2, cross_size=2)
        self.calls = 0

    def allgather(self, stuff: Any) -> list[Any]:
        self.calls += 1
        cross, local, value = stuff
        return [(r // 2, r % 2, f"v{r}" if value is not None else None) for r in range(4)]


@pytest.mark.parametrize(("rank", "all_local", "gathered", "broadcast"), [
    (0, ["v0", "v1"], ["v0", "v1"], "v0"),
    (1, ["v0", "v1"], None, "v0"),
    (2, ["v2", "v3"], ["v2", "v3"], "v2"),
    (3, ["v2", "v3"], None, "v2"),
])
def test_local_collectives_keep_this_nodes_part(rank: int, all_local: list[str],
                                               gathered: list[str] | None,
                                               broadcast: str) -> None:
    dist = _Scripted(rank)
    assert dist.allgather_local(f"v{rank}") == all_local
    assert dist.gather_local(f"v{rank}") == gathered
    assert dist.broadcast_local(f"v{rank}") == broadcast
    assert dist.calls == 3      # one collective of every rank each


def test_local_collectives_of_one_process_cost_nothing() -> None:
    dist = DistributedContext()
    assert (dist.allgather_local(1), dist.gather_local(2), dist.broadcast_local(3)) == (
        [1], [2], 3)


# ------------------------------------------------------------- train context
def test_early_exit_metadata_alert_and_tensorboard(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    with core.init(env=_env(trial), exit_on_preempt=False,
                   tensorboard_mode=TensorboardMode.MANUAL) as ctx:
        assert ctx.train.get_metadata() is None
        assert ctx.train.set_metadata({"a": [1, 2], "b": "it's"}) == {"a": [1, 2], "b": "it's"}
        assert ctx.train.get_metadata() == {"a": [1, 2], "b": "it's"}
        ctx.train.report_early_exit(EarlyExitReason.USER_REQUESTED_STOP)
        ctx.train.report_early_exit(EarlyExitReason.INVALID_HP)    # dropped: once per run
        ctx.alert("title", "desc", "warn")
        with pytest.raises(DethpcError, match="alert level"):
            ctx.alert(level="loud")
        path = ctx.train.get_tensorboard_path()
        ctx.train.upload_tensorboard_files()
    assert path == trial / "tensorboard" and path.is_dir()
    assert json.loads((trial / "trial-metadata.json").read_text()) == {"a": [1, 2], "b": "it's"}
    kinds = [(r["kind"], r.get("reason") or r.get("level") or r.get("metadata"))
             for r in _records(trial)]
    assert kinds == [("metadata", {"a": [1, 2], "b": "it's"}),
                     ("early_exit", "user_requested_stop"), ("alert", "warn")]


def test_upload_tensorboard_files_needs_manual_mode(tmp_path: Path) -> None:
    with core.init(env=_env(_trial(tmp_path)), exit_on_preempt=False) as ctx, \
            pytest.raises(DethpcError, match="MANUAL"):
        ctx.train.upload_tensorboard_files()


def test_invalid_hp_leaving_the_context_records_an_early_exit_and_exits_0(
        tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    with pytest.raises(SystemExit) as caught, core.init(env=_env(trial)):
        raise dethpc.InvalidHP("lr too large")
    assert caught.value.code == 0
    assert [r["reason"] for r in _records(trial) if r["kind"] == "early_exit"] == ["invalid_hp"]
    with pytest.raises(TypeError):
        InvalidHP(3)  # type: ignore[arg-type]


def test_metadata_survives_another_run_and_other_ranks_do_not_write(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    with core.init(env=_env(trial), exit_on_preempt=False) as ctx:
        ctx.train.set_metadata({"epoch": 1})
    rank1 = core.TrainContext(None, DistributedContext(rank=1, size=2), trial_dir=trial)
    assert rank1.set_metadata({"epoch": 99}) == {"epoch": 99}
    assert rank1.get_metadata() == {"epoch": 1}      # rank 1 reads, never writes
    with core.init(env=_env(trial), exit_on_preempt=False) as again:
        assert again.train.get_metadata() == {"epoch": 1}


@pytest.mark.parametrize(("smaller", "expected"), [(True, 0.2), (False, 0.9)])
def test_best_validation_reads_the_experiments_trials(tmp_path: Path, smaller: bool,
                                                      expected: float) -> None:
    t1, t2 = _trial(tmp_path, 1), tmp_path / "exp" / "trials" / "2"
    t2.mkdir()
    (t1 / "metrics.jsonl").write_text(
        '{"kind":"validation","steps":1,"metrics":{"loss":0.5}}\n'
        '{"kind":"training","steps":1,"metrics":{"loss":0.01}}\nnot json\n')
    (t2 / "metrics.jsonl").write_text(
        '{"kind":"validation","steps":1,"metrics":{"loss":0.2}}\n'
        '{"kind":"validation","steps":2,"metrics":{"loss":0.9,"acc":1}}\n'
        '{"kind":"validation","steps":3,"metrics":{"loss":null}}\n')
    assert best_validation(t1, "loss", smaller) == expected
    assert best_validation(t1, "missing", smaller) is None
    lone = tmp_path / "spool" / "detached" / "123_0"        # no siblings: itself only
    lone.mkdir(parents=True)
    (lone / "metrics.jsonl").write_text('{"kind":"validation","metrics":{"loss":3}}\n')
    assert best_validation(lone, "loss", smaller) == 3.0


def test_get_experiment_best_validation_uses_the_searcher_of_the_config(tmp_path: Path) -> None:
    trial = _trial(tmp_path, config="searcher: {name: single, metric: acc, "
                                    "smaller_is_better: false}\n")
    (trial / "metrics.jsonl").write_text('{"kind":"validation","metrics":{"acc":0.7}}\n'
                                         '{"kind":"validation","metrics":{"acc":0.8}}\n')
    with core.init(env=_env(trial), exit_on_preempt=False) as ctx:
        assert ctx.train.get_experiment_best_validation() == 0.8
    with core.init(env={}, exit_on_preempt=False) as off:
        assert off.train.get_experiment_best_validation() is None


# ------------------------------------------------------------ checkpoints
def test_checkpoint_delete_hides_records_and_removes(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    with core.init(env=_env(trial), exit_on_preempt=False) as ctx:
        uuids = []
        for step in (1, 2):
            with ctx.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
                (path / "w").write_text(str(step))
            uuids.append(uuid)
        ctx.checkpoint.delete(uuids[1])
        assert ctx.checkpoint.latest() == uuids[0]
        with pytest.raises(CheckpointNotFound):
            ctx.checkpoint.delete(uuids[1])
        with pytest.raises(CheckpointNotFound), ctx.checkpoint.restore_path(storage_id="gone"):
            pass
    assert not (trial / "checkpoints" / uuids[1]).exists()
    assert not list((trial / "checkpoints").glob(".deleted-*"))
    assert [r["uuid"] for r in _records(trial) if r["kind"] == "checkpoint_deleted"] == [
        uuids[1]]
    ckpt = core.CheckpointContext(trial / "checkpoints", DistributedContext(rank=1, size=2))
    with pytest.raises(DethpcError, match="rank 1"):
        ckpt.delete(uuids[0])


# --------------------------------------------------------- life cycle
def test_start_and_close_by_hand_end_a_stopped_run_with_81(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    (trial / "stop").write_text("stop")
    ctx = core.init(env=_env(trial), stop_check_interval_s=0)
    ctx.start()
    assert ctx.preempt.start() is ctx.preempt
    assert ctx.preempt.should_preempt()
    with pytest.raises(SystemExit) as caught:
        ctx.close()
    assert caught.value.code == EXIT_STOPPED
    ctx.close()                         # closing twice: nothing more happens


def test_workers_ask_master_decides_alone(tmp_path: Path) -> None:
    class NoCollective(DistributedContext):
        def broadcast(self, stuff: Any) -> Any:
            raise AssertionError("WorkersAskMaster takes no collective")

    stop = tmp_path / "stop"
    preempt = PreemptContext(NoCollective(rank=1, size=2, local_size=2), stop_file=stop,
                             mode=PreemptMode.WorkersAskMaster, stop_check_interval_s=0)
    try:
        assert not preempt.should_preempt()
        stop.write_text("pause")
        assert preempt.should_preempt() and preempt.reason == "pause"
    finally:
        preempt.close()


def test_profiler_and_experimental_are_logged_no_ops(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.INFO)
    with core.init(env=_env(_trial(tmp_path)), exit_on_preempt=False) as ctx:
        ctx.profiler.on()
        ctx.profiler.off()
        ctx.experimental.report_task_using_checkpoint(type("C", (), {"uuid": "u1"})())
    assert "no system metrics" in caplog.text and "u1" in caplog.text


# ------------------------------------------------------------ searcher
def test_searcher_context_missing_and_dummy_operation() -> None:
    with pytest.raises(DethpcError, match="no searcher target"):
        next(iter(core.SearcherContextMissing().operations()))
    op = core.DummySearcherOperation(5, True)
    op.report_progress(2)
    op.report_completed(0.1)
    assert (op.length, op.completed) == (5, True)
    dummy = core.DummySearcherContext(length=3)
    lengths = []
    for o in dummy.operations():
        lengths.append(o.length)
        o.report_completed(0.2)
    # Determined's Dummy answers EPOCHS whatever its length's unit
    assert lengths == [3] and dummy.get_configured_units() is core.Unit.EPOCHS


# ------------------------------------------------------ import_from_path
def test_import_from_path_imports_a_second_module_of_the_same_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    new, old = tmp_path / "new", tmp_path / "old"
    for where, value in ((new, "new"), (old, "old")):
        (where / "pkgx").mkdir(parents=True)
        (where / "model_defx.py").write_text(f"WHICH = {value!r}\n")
        (where / "pkgx" / "__init__.py").write_text(f"WHICH = {value!r}\n")
    monkeypatch.syspath_prepend(str(new))
    import model_defx  # type: ignore[import-not-found]

    with dethpc.import_from_path(old):
        import model_defx as old_def  # type: ignore[import-not-found]
        import pkgx as old_pkg  # type: ignore[import-not-found]

        with pytest.raises(DethpcError, match="nested"), dethpc.import_from_path(new):
            pass
    assert (model_defx.WHICH, old_def.WHICH, old_pkg.WHICH) == ("new", "old", "old")
    assert sys.modules["model_defx"] is model_defx and "pkgx" not in sys.modules
    assert str(old) not in sys.path


# ------------------------------------------------------------------ util
@pytest.mark.parametrize(("base", "source", "merged"), [
    ({"a": 1}, {"b": 2}, {"a": 1, "b": 2}),
    ({"a": {"x": 1, "y": 2}}, {"a": {"y": 3}}, {"a": {"x": 1, "y": 3}}),
    ({"a": 1}, {"a": {"y": 3}}, {"a": {"y": 3}}),
    ({"a": {"x": 1}}, {"a": 5}, {"a": 5}),
])
def test_merge_dicts(base: dict[str, Any], source: dict[str, Any],
                     merged: dict[str, Any]) -> None:
    before = json.dumps(base)
    assert util.merge_dicts(base, source) == merged
    assert json.dumps(base) == before


def test_yaml_helpers() -> None:
    assert util.yaml_safe_load("a: [1, 2]\n") == {"a": [1, 2]}
    assert util.yaml_safe_load(util.yaml_safe_dump({"b": "it's"})) == {"b": "it's"}
    with pytest.raises(DethpcError, match="'a' appears twice"):
        util.safe_load_yaml_with_exceptions("a: 1\na: 2\n")
    with pytest.raises(DethpcError, match="YAML error"):
        util.safe_load_yaml_with_exceptions("a: [1\n")


def test_overwrite_deepspeed_config(tmp_path: Path) -> None:
    from dethpc.pytorch.deepspeed import overwrite_deepspeed_config

    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": 8, "fp16": {"enabled": False}}))
    assert overwrite_deepspeed_config(str(cfg), {"fp16": {"enabled": True}}) == {
        "train_batch_size": 8, "fp16": {"enabled": True}}
    with pytest.raises(DethpcError, match="ds.json"):
        overwrite_deepspeed_config(str(tmp_path / "ds.json.missing"), {})


# ------------------------------------------------------------------ DET_*
@pytest.mark.parametrize(("env", "expected"), [
    ({}, {"DET_TRIAL_RUN_ID": "1", "DET_ALLOCATION_ID": "0.0.1", "DET_SLOT_IDS": "[0]",
          "DET_CONTAINER_ID": "[cont=0]", "DET_UNIQUE_PORT_OFFSET": "0",
          "DET_STEPS_COMPLETED": "0"}),
    ({"DETHPC_RUN_ID": "2", "DETHPC_EXPERIMENT_ID": "4", "DETHPC_TRIAL_ID": "9",
      "SLURM_RESTART_COUNT": "7"},
     {"DET_TRIAL_RUN_ID": "3", "DET_ALLOCATION_ID": "4.9.3"}),
    ({"SLURM_RESTART_COUNT": "1", "SLURM_JOB_GPUS": "2,3", "SLURM_NODEID": "1",
      "SLURMD_NODENAME": "g1", "SLURM_JOB_ID": "55", "SLURM_CLUSTER_NAME": "c"},
     {"DET_TRIAL_RUN_ID": "2", "DET_SLOT_IDS": "[2,3]", "DET_UNIQUE_PORT_OFFSET": "2",
      "DET_CONTAINER_ID": "[cont=1]", "DET_AGENT_ID": "g1", "DET_RESOURCES_ID": "55",
      "DET_CLUSTER_ID": "c"}),
])
def test_run_env(env: dict[str, str], expected: dict[str, str]) -> None:
    got = detenv.run_env(env)
    assert {k: got[k] for k in expected} == expected
    assert "DET_LATEST_CHECKPOINT" not in got and set(got) <= set(detenv.RUN)


def test_run_env_names_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    for name, steps, when in (("a", 10, 1.0), ("b", 30, 1.0), ("c", 30, 2.0), ("d", 99, 0)):
        (trial / "checkpoints" / name).mkdir(parents=True)
        if name != "d":                     # d: no metadata.json yet (being written)
            (trial / "checkpoints" / name / "metadata.json").write_text(
                json.dumps({"steps_completed": steps, "time": when}))
    (trial / "checkpoints" / ".deleted-e").mkdir()
    got = detenv.run_env(_env(trial))
    assert (got["DET_LATEST_CHECKPOINT"], got["DET_STEPS_COMPLETED"]) == ("c", "30")
    assert json.loads(got["DET_HPARAMS"]) == {"lr": 0.5}


def test_detenv_prints_export_lines_bash_reads_back(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess

    trial = _trial(tmp_path)
    (trial / "hparams.json").write_text(json.dumps({"q": "it's \"q\" $x"}))
    for key, value in _env(trial).items():
        monkeypatch.setenv(key, value)
    assert detenv.main([]) == 0
    lines = capsys.readouterr().out
    done = subprocess.run(["bash", "-c", lines + 'printf %s "$DET_HPARAMS"'],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"q": "it's \"q\" $x"}


def test_the_per_rank_shim_sets_its_own_nodes_values() -> None:
    from dethpc.launch._common import worker_env

    batch = {"DET_TRIAL_ID": "1", "DET_AGENT_ID": "node0", "DET_SLOT_IDS": "[0,1]",
             "SLURMD_NODENAME": "node1", "SLURM_NODEID": "1", "SLURM_STEP_GPUS": "4,5",
             "SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NTASKS": "4",
             "SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "2(x2)"}
    env = worker_env(batch)
    assert (env["DET_AGENT_ID"], env["DET_SLOT_IDS"], env["DET_CONTAINER_ID"]) == (
        "node1", "[4,5]", "[cont=1]")
    assert "DET_AGENT_ID" not in worker_env({k: v for k, v in batch.items()
                                             if not k.startswith("DET_")})
