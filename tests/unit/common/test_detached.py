"""``dethpc.common.detached``: a Slurm job dethpc did not submit registers itself in the spool,
and ``dethpc.core`` works over that directory (metrics, checkpoints, resume after a
requeue); outside Slurm jobs nothing is written and the Dummy twins stay.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from dethpc import core
from dethpc.common.detached import job_ref, register, trial_dir, write_once
from dethpc.common.errors import DethpcError
from dethpc.core import DummyTrainContext, TrainContext

JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_JOB_USER": "alice",
       "SLURM_SUBMIT_DIR": "/home/alice", "SLURM_CLUSTER_NAME": "dev",
       "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_RESTART_COUNT": "0"}
TASK = {**JOB, "SLURM_JOB_ID": "4250", "SLURM_ARRAY_JOB_ID": "4242",
        "SLURM_ARRAY_TASK_ID": "3"}


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DETHPC_SPOOL", str(tmp_path / "spool"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm"))   # no scontrol: no outputs.txt
    return tmp_path / "spool"


@pytest.mark.parametrize("env,ref", [
    ({}, None),
    ({"SLURM_JOB_ID": " "}, None),
    (JOB, "4242"),
    (TASK, "4242_3"),
    ({**JOB, "SLURM_ARRAY_JOB_ID": "4242"}, "4242"),   # no task id: the job itself
])
def test_job_ref(env: dict[str, str], ref: str | None) -> None:
    assert job_ref(env) == ref


def test_outside_slurm_nothing_is_registered(spool: Path) -> None:
    assert trial_dir({}) is None
    assert not spool.exists()


def test_a_wrapped_job_keeps_its_trial_dir(spool: Path, tmp_path: Path) -> None:
    assert trial_dir({**JOB, "DETHPC_TRIAL_DIR": str(tmp_path / "t")}) == tmp_path / "t"
    assert not spool.exists()


def test_detached_0_turns_registration_off(spool: Path) -> None:
    assert trial_dir({**JOB, "DETHPC_DETACHED": "0"}) is None
    assert not spool.exists()


def test_a_slurm_job_registers_once(spool: Path) -> None:
    found = trial_dir({**TASK, "DETHPC_METRIC": "val_loss"})
    assert found == spool / "detached" / "4242_3"
    reg = json.loads((found / "register.json").read_text())
    assert {k: reg[k] for k in ("user", "job_id", "job_ref", "array_job_id", "array_task_id",
                                "job_name", "submit_dir", "cluster", "nodes", "metric")} == {
        "user": "alice", "job_id": "4250", "job_ref": "4242_3", "array_job_id": "4242",
        "array_task_id": 3, "job_name": "train", "submit_dir": "/home/alice",
        "cluster": "dev", "nodes": "n[1-2]", "metric": "val_loss"}
    assert json.loads((found / "hparams.json").read_text()) == {}
    assert (found / "checkpoints").is_dir()
    # a requeued run (same job) finds the same directory; the registration stays
    again = trial_dir({**TASK, "SLURM_RESTART_COUNT": "1", "SLURM_JOB_NAME": "other"})
    assert again == found
    assert json.loads((found / "register.json").read_text()) == reg
    assert sorted(p.name for p in found.iterdir()) == ["checkpoints", "hparams.json",
                                                       "register.json"]


def test_racing_writers_leave_one_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "register.json"
    wins: list[bool] = []
    texts = [json.dumps({"writer": i, "pad": "x" * 65536}) for i in range(16)]
    threads = [threading.Thread(target=lambda t=t: wins.append(write_once(target, t)))
               for t in texts]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert wins.count(True) == 1
    assert target.read_text() in texts
    assert [p.name for p in tmp_path.iterdir()] == ["register.json"]   # no temp files left


def test_core_in_a_detached_job_reports_and_resumes(spool: Path) -> None:
    env = {**JOB}
    with core.init(env=env, exit_on_preempt=False) as ctx:
        assert isinstance(ctx.train, TrainContext) and ctx.info.on_cluster
        assert ctx.info.latest_checkpoint is None and ctx.hparams == {}
        ctx.train.report_training_metrics(5, {"loss": 0.5})
        ctx.train.report_validation_metrics(5, {"loss": 0.4})
        with ctx.checkpoint.store_path({"steps_completed": 5}) as (path, uuid):
            (path / "state").write_text("5")
    tdir = spool / "detached" / "4242"
    kinds = [json.loads(line)["kind"] for line in (tdir / "metrics.jsonl").read_text()
             .splitlines()]
    assert kinds == ["training", "validation", "checkpoint"]
    # the requeued run (same job id, restart count 1) resumes from that checkpoint
    with core.init(env={**env, "SLURM_RESTART_COUNT": "1"}, exit_on_preempt=False) as ctx:
        assert ctx.info.latest_checkpoint == uuid and ctx.info.run_id == 1
        with ctx.checkpoint.restore_path(uuid) as path:
            assert (path / "state").read_text() == "5"
    info = core.get_cluster_info(env)
    assert info is not None and info.latest_checkpoint == uuid


def test_core_outside_slurm_keeps_the_dummy_twins(spool: Path) -> None:
    with core.init(env={}) as ctx:
        assert isinstance(ctx.train, DummyTrainContext)
    assert core.get_cluster_info({}) is None
    assert not spool.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_spool_entry_of_another_user_is_refused(
        spool: Path, capsys: pytest.CaptureFixture[str]) -> None:
    squat = spool / "detached" / "4242"
    squat.mkdir(parents=True)
    os.chown(squat, 4321, 4321)
    with pytest.raises(DethpcError, match="belongs to uid 4321"):
        register(JOB, "4242")
    assert trial_dir(JOB) is None          # the job runs on, untracked
    assert "belongs to uid 4321" in capsys.readouterr().err
    assert list(squat.iterdir()) == []


def test_an_unwritable_spool_leaves_the_job_untracked_not_failed(
        spool: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spool.write_text("not a directory")
    assert trial_dir(JOB) is None
    assert "not tracked" in capsys.readouterr().err
    with core.init(env=JOB) as ctx:
        assert isinstance(ctx.train, DummyTrainContext)
