"""``dethpc.control.adoption``: the daemon adopts jobs that registered themselves in the spool
(``dethpc.common.detached``) into the real store, idempotently, and only its own user's; the
reconciler then ingests their files through the trial link and ends them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from sqlmodel import select

from dethpc import core
from dethpc.backends.base import JobInfo, JobState
from dethpc.backends.local import LocalBackend
from dethpc.common.detached import trial_dir
from dethpc.common.errors import DethpcError
from dethpc.common.kinds import ExperimentKind
from dethpc.config import parse_experiment_config
from dethpc.config.model import ClusterConfig
from dethpc.control.adoption import Adopter, detached_config, parse_registration
from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.store.models import (
    Batch,
    Checkpoint,
    Experiment,
    ExperimentState,
    Job,
    Metric,
    SearcherState,
    Trial,
    TrialState,
)
from tests.unit.control.test_reconcile_store import tick

JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_SUBMIT_DIR": "/home/a",
       "SLURM_JOB_NODELIST": "n1"}


def task(i: int) -> dict[str, str]:
    return {**JOB, "SLURM_JOB_ID": str(5000 + i), "SLURM_ARRAY_JOB_ID": "4999",
            "SLURM_ARRAY_TASK_ID": str(i), "SLURM_JOB_NAME": "sweep"}


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DETHPC_SPOOL", str(tmp_path / "spool"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm"))   # no scontrol: no outputs.txt
    return tmp_path / "spool"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'db.sqlite'}")


def adopter(store: Store, tmp_path: Path) -> Adopter:
    return Adopter(store, tmp_path / "runs", "slurm")


def rows(store: Store) -> tuple[list[Experiment], list[Trial], list[Job], list[Batch]]:
    with store.session() as s:
        return (list(s.exec(select(Experiment))), list(s.exec(select(Trial))),
                list(s.exec(select(Job))), list(s.exec(select(Batch))))


def test_config_of_an_adopted_job_is_valid() -> None:
    reg = parse_registration({"job_ref": "7", "job_id": "7", "job_name": "x",
                              "metric": "acc"}, "r")
    cfg = parse_experiment_config(yaml.safe_load(detached_config(reg)))
    assert (cfg.name, cfg.searcher.name, cfg.searcher.metric, cfg.max_restarts) == \
        ("x", "single", "acc", 0)
    assert parse_registration({"job_ref": "7", "job_id": "7"}, "r").metric == "loss"


@pytest.mark.parametrize("data,match", [
    ([], "JSON object"),
    ({"job_id": "7"}, "job_ref and job_id"),
    ({"job_ref": "7_1", "job_id": "8", "array_task_id": "1"}, "array_task_id"),
])
def test_malformed_registrations(data: object, match: str) -> None:
    with pytest.raises(DethpcError, match=match):
        parse_registration(data, "r")


def test_a_registered_job_is_adopted_once(store: Store, tmp_path: Path, spool: Path) -> None:
    sdir = trial_dir({**JOB, "DETHPC_METRIC": "val"})
    assert sdir is not None
    a = adopter(store, tmp_path)
    assert a.scan() == 1
    (exp,), (trial,), (job,), (batch,) = rows(store)
    assert (exp.kind, exp.name, exp.backend, exp.state) == (
        ExperimentKind.DETACHED, "train", "slurm", ExperimentState.ACTIVE)
    assert exp.owner and exp.run_dir == str(tmp_path / "runs" / str(exp.id))
    assert yaml.safe_load(exp.config_yaml)["searcher"]["metric"] == "val"
    assert (job.ref, job.live, batch.name, batch.array_job_id) == ("4242", True,
                                                                  "detached:4242", "4242")
    assert not trial.needs_job
    with store.session() as s:
        ss = s.get(SearcherState, exp.id)
        assert ss is not None and ss.initialized and ss.shutdown
    link = Path(exp.run_dir) / "trials" / str(trial.id)
    assert link.is_symlink() and link.resolve() == sdir.resolve()
    assert json.loads((sdir / "adopted.json").read_text()) == {"experiment": exp.id,
                                                               "trial": trial.id}
    assert a.scan() == 0 and adopter(store, tmp_path).scan() == 0
    assert [len(r) for r in rows(store)] == [1, 1, 1, 1]


def test_a_daemon_killed_before_adopted_json_adopts_nothing_twice(
        store: Store, tmp_path: Path, spool: Path) -> None:
    sdir = trial_dir(JOB)
    assert sdir is not None
    adopter(store, tmp_path).scan()
    (exp,), (trial,), _, _ = rows(store)
    # as if killed right after the commit: neither the link nor the marker was written
    (sdir / "adopted.json").unlink()
    (Path(exp.run_dir) / "trials" / str(trial.id)).unlink()
    assert adopter(store, tmp_path).scan() == 1
    assert [len(r) for r in rows(store)] == [1, 1, 1, 1]
    assert (Path(exp.run_dir) / "trials" / str(trial.id)).is_symlink()
    assert (sdir / "adopted.json").exists()


def test_array_tasks_share_one_experiment(store: Store, tmp_path: Path, spool: Path) -> None:
    trial_dir(task(0))
    trial_dir(task(1))
    a = adopter(store, tmp_path)
    assert a.scan() == 2
    (exp,), trials, jobs, (batch,) = rows(store)
    assert sorted(j.ref for j in jobs) == ["4999_0", "4999_1"] and batch.size == 2
    assert sorted(t.request_id for t in trials) == [0, 1] and exp.name == "sweep"
    # both end; the experiment completes; a late task reopens it
    for j in jobs:
        tick(store, exp.id or 0, {j.ref or "": JobInfo(ref=j.ref or "",
                                                       state=JobState.COMPLETED)})
    assert rows(store)[0][0].state == ExperimentState.COMPLETED
    trial_dir(task(2))
    assert a.scan() == 1
    (exp,), trials, _, _ = rows(store)
    assert len(trials) == 3 and exp.state == ExperimentState.ACTIVE and exp.ended_at is None


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_registration_is_left_alone(store: Store, tmp_path: Path,
                                                  spool: Path) -> None:
    sdir = trial_dir(JOB)
    assert sdir is not None
    os.chown(sdir / "register.json", 4321, 4321)
    os.chown(sdir, 4321, 4321)
    assert adopter(store, tmp_path).scan() == 0
    assert rows(store)[0] == [] and not (sdir / "adopted.json").exists()


def test_reconciler_ingests_through_the_link_and_completes(
        store: Store, tmp_path: Path, spool: Path) -> None:
    env = {**JOB, "DETHPC_METRIC": "val_loss"}
    with core.init(env=env, exit_on_preempt=False) as ctx:
        ctx.train.report_training_metrics(3, {"loss": 0.9})
        ctx.train.report_validation_metrics(3, {"val_loss": 0.5})
        with ctx.checkpoint.store_path({"steps_completed": 3}) as (path, uuid):
            (path / "w").write_text("3")
    daemon = Daemon(store, ClusterConfig(runs_root=tmp_path / "runs"),
                    LocalBackend(tmp_path / "local"))
    daemon.adopter.scan()
    (exp,), _, (job,), _ = rows(store)
    tick(store, exp.id or 0, {"4242": JobInfo(ref="4242", state=JobState.RUNNING)})
    (exp,), (trial,), _, _ = rows(store)
    assert trial.state == TrialState.RUNNING and trial.best_validation == 0.5
    assert trial.latest_checkpoint == uuid and trial.steps_completed == 3
    with store.session() as s:
        ck = s.get(Checkpoint, uuid)
        assert ck is not None and Path(ck.path, "w").read_text() == "3"
        assert len(list(s.exec(select(Metric)))) == 2
    tick(store, exp.id or 0, {"4242": JobInfo(ref="4242", state=JobState.COMPLETED,
                                              exit_code=0)})
    (exp,), (trial,), (job,), _ = rows(store)
    assert trial.state == TrialState.COMPLETED and exp.state == ExperimentState.COMPLETED
    assert not job.live
    # the daemon submits nothing for it
    assert daemon.submit_experiment(exp.id or 0) == 0


def test_daemon_tick_adopts_without_any_open_experiment(store: Store, tmp_path: Path,
                                                        spool: Path) -> None:
    trial_dir(JOB)
    daemon = Daemon(store, ClusterConfig(runs_root=tmp_path / "runs"),
                    LocalBackend(tmp_path / "local"))
    stats = daemon.tick()
    assert stats.changed and stats.experiments == 1 and stats.submitted == 0
    assert len(rows(store)[0]) == 1


def test_list_and_describe_show_the_kind(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from dethpc.surfaces.cli.common import ENV
    from dethpc.surfaces.cli.main import app

    monkeypatch.setenv("COLUMNS", "200")
    trial_dir(JOB)   # the spool is $DETHPC_HOME/spool
    assert Adopter(ENV.store, home / "runs", "local").scan() == 1
    cli = CliRunner()
    listed = cli.invoke(app, ["experiment", "list"])
    assert listed.exit_code == 0 and "kind" in listed.stdout and "detached" in listed.stdout
    rows = json.loads(cli.invoke(app, ["experiment", "list", "--json"]).stdout)
    assert [r["kind"] for r in rows] == ["detached"]
    described = cli.invoke(app, ["experiment", "describe", str(rows[0]["id"])])
    assert described.exit_code == 0, described.stdout
    assert "kind: detached (a job dethpc did not submit" in described.stdout
    paused = cli.invoke(app, ["experiment", "pause", str(rows[0]["id"])])
    assert paused.exit_code != 0 and isinstance(paused.exception, DethpcError)
    assert "of kind detached" in str(paused.exception)   # main() prints it, no traceback
