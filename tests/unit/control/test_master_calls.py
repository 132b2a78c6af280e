"""The records a trial writes for Determined's master calls (early_exit, metadata, alert,
checkpoint_deleted): the pure rules as tables (``ingest_rules``, ``job_rules``), then
each record carried through a real reconcile on SQLite into what ``describe`` and the
event log show, and what the searcher is told."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from dethpc.backends.base import JobInfo, JobState
from dethpc.common.exitcodes import ExitReason, TrialExit
from dethpc.common.kinds import ExperimentKind
from dethpc.common.paths import ExperimentPaths
from dethpc.config.model import ClusterConfig
from dethpc.control.daemon import Daemon
from dethpc.control.job_end import Decision, Kind, Verdict
from dethpc.control.reconcile.ingest_rules import (
    Alert,
    BadRecord,
    Kept,
    LineKind,
    alert_of,
    early_exit_of,
    latest_kept,
    line_kind,
    metadata_of,
)
from dethpc.control.reconcile.job_rules import EndFacts, trial_change
from dethpc.store import Store
from dethpc.store.models import (
    Batch,
    BatchState,
    Checkpoint,
    CheckpointState,
    EarlyExit,
    Experiment,
    ExperimentState,
    Job,
    SearcherState,
    Trial,
    TrialState,
)
from dethpc.surfaces import views
from tests.unit.control.test_reconcile_store import tick


# ---------------------------------------------------------------------- pure rules
@pytest.mark.parametrize(("line", "kind"), [
    ({"kind": "early_exit", "reason": "invalid_hp"}, LineKind.EARLY_EXIT),
    ({"kind": "metadata", "metadata": {}}, LineKind.METADATA),
    ({"kind": "alert", "title": "t"}, LineKind.ALERT),
    ({"kind": "checkpoint_deleted", "uuid": "u1"}, LineKind.CHECKPOINT_DELETED),
    ({"kind": "checkpoint_deleted"}, LineKind.OTHER),                # no uuid: not one
    ({"kind": "checkpoint_deleted", "uuid": ""}, LineKind.OTHER),
    ({"kind": "other"}, LineKind.OTHER),                              # not a member name
    ({"kind": ["early_exit"]}, LineKind.OTHER),
])
def test_line_kind_of_master_call_records(line: dict[str, Any], kind: LineKind) -> None:
    assert line_kind(line) is kind


@pytest.mark.parametrize(("line", "got"), [
    ({"reason": "invalid_hp"}, EarlyExit.INVALID_HP),
    ({"reason": "user_requested_stop"}, EarlyExit.USER_REQUESTED_STOP),
    ({"reason": "EXITED_REASON_INVALID_HP"}, None),   # Determined's wire value: not ours
    ({}, None),
])
def test_early_exit_of(line: dict[str, Any], got: EarlyExit | None) -> None:
    out = early_exit_of(line)
    if got is None:
        assert isinstance(out, BadRecord) and "allowed: invalid_hp, user_requested_stop" \
            in out.problem
    else:
        assert out is got


@pytest.mark.parametrize(("line", "got"), [
    ({"metadata": {"a": 1, "b": {"c": [1, 2]}}}, {"a": 1, "b": {"c": [1, 2]}}),
    ({"metadata": {}}, {}),
    ({"metadata": [1]}, "a list"),
    ({}, "a NoneType"),
])
def test_metadata_of(line: dict[str, Any], got: Any) -> None:
    out = metadata_of(line)
    if isinstance(got, str):
        assert isinstance(out, BadRecord) and got in out.problem
    else:
        assert out == got


@pytest.mark.parametrize(("line", "alert", "message"), [
    ({"title": "T", "description": "D", "level": "warn"}, Alert("warn", "T", "D"),
     "[warn] T: D"),
    ({"title": "only", "level": "error"}, Alert("error", "only", ""), "[error] only"),
    ({"level": "loud"}, Alert("info", "", ""), "[info] (empty alert)"),
    ({"title": 3, "description": None}, Alert("info", "3", ""), "[info] 3"),
])
def test_alert_of(line: dict[str, Any], alert: Alert, message: str) -> None:
    assert alert_of(line) == alert and alert.message() == message


@pytest.mark.parametrize(("kept", "latest"), [
    ([], None),
    ([Kept("a", 10, 1.0), Kept("b", 20, 0.5)], "b"),     # most steps
    ([Kept("a", 10, 1.0), Kept("b", 10, 2.0)], "b"),     # then the newest
])
def test_latest_kept(kept: list[Kept], latest: str | None) -> None:
    assert latest_kept(kept) == latest


def facts(early: EarlyExit | None, target: int = 100, full: int = 100) -> EndFacts:
    return EndFacts(kind=ExperimentKind.MANAGED, target_length=target, full_length=full,
                    restarts=0, max_restarts=3, stop_reason=None, job_state="COMPLETED",
                    exit_code=0, early_exit=early)


COMPLETE = Decision(kind=Kind.ENDED, verdict=Verdict.COMPLETE, reason=ExitReason.COMPLETED)


@pytest.mark.parametrize(("early", "target", "state", "reason", "exited"), [
    (None, 100, TrialState.COMPLETED, "completed", TrialExit.COMPLETED),
    (None, 25, TrialState.WAITING, "completed", TrialExit.COMPLETED),   # promotion: waits
    (EarlyExit.INVALID_HP, 100, TrialState.COMPLETED, "invalid_hp", TrialExit.INVALID_HP),
    (EarlyExit.INVALID_HP, 25, TrialState.COMPLETED, "invalid_hp", TrialExit.INVALID_HP),
    (EarlyExit.USER_REQUESTED_STOP, 25, TrialState.COMPLETED, "user_requested_stop",
     TrialExit.USER_REQUESTED_STOP),
])
def test_a_completed_job_after_an_early_exit(early: EarlyExit | None, target: int,
                                             state: TrialState, reason: str,
                                             exited: TrialExit) -> None:
    change = trial_change(COMPLETE, facts(early, target))
    assert change is not None
    assert (change.state, change.reason, change.exited) == (state, reason, exited)
    assert (change.note is not None) == (early is not None)


def test_an_early_exit_does_not_change_a_failed_or_stopped_end() -> None:
    failed = Decision(kind=Kind.ENDED, verdict=Verdict.FAIL, reason=ExitReason.ERROR)
    stopped = Decision(kind=Kind.ENDED, verdict=Verdict.STOPPED, reason=ExitReason.STOPPED)
    for d in (failed, stopped):
        assert trial_change(d, facts(EarlyExit.INVALID_HP)) == trial_change(d, facts(None))


# ---------------------------------------------------------------------- on the store
def config(searcher: str) -> str:
    return (f"name: t\nentrypoint: python3 train.py\nmax_restarts: 1\n"
            f"searcher: {{{searcher}, metric: loss, max_length: {{batches: 10}}}}\n"
            "hyperparameters: {lr: {type: double, minval: 0.1, maxval: 1.0}}\n"
            "checkpoint_storage: {save_trial_latest: 5, save_trial_best: 0, "
            "save_experiment_best: 0}\n")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'db.sqlite'}")


def experiment(store: Store, tmp_path: Path, searcher: str) -> int:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with store.session() as s:
        exp = Experiment(name="t", config_yaml=config(searcher), run_dir=str(run_dir))
        s.add(exp)
        s.flush()
        assert exp.id is not None
        s.add(SearcherState(experiment_id=exp.id))
        exp_id = exp.id
    tick(store, exp_id, {})   # the searcher creates its first trials
    return exp_id


def start(store: Store, exp_id: int, trial_id: int) -> str:
    """A running job for ``trial_id``; its ref."""
    ref = f"{100 + trial_id}_0"
    with store.session() as s:
        batch = Batch(experiment_id=exp_id, state=BatchState.SUBMITTED,
                      array_job_id=ref.split("_")[0])
        s.add(batch)
        s.flush()
        assert batch.id is not None
        s.add(Job(experiment_id=exp_id, trial_id=trial_id, batch_id=batch.id, ref=ref,
                  state=JobState.RUNNING))
        trial = s.get(Trial, trial_id)
        assert trial is not None
        trial.needs_job = False
        s.add(trial)
    return ref


def trial_dir(tmp_path: Path, trial_id: int) -> Path:
    return ExperimentPaths(tmp_path / "run").trial(trial_id).ensure().root


def write(tmp_path: Path, trial_id: int, *records: dict[str, Any],
          exit_reason: str | None = None, ref: str = "") -> None:
    d = trial_dir(tmp_path, trial_id)
    with (d / "metrics.jsonl").open("a") as f:
        for rec in records:
            f.write(json.dumps({**rec, "time": 1000.0}) + "\n")
    if exit_reason is not None:
        with (d / "exits.jsonl").open("a") as f:
            f.write(json.dumps({"reason": exit_reason, "code": 0, "restart": 0,
                                "job": ref}) + "\n")


def trials(store: Store) -> dict[int, Trial]:
    with store.session() as s:
        return {t.id: t for t in s.exec(select(Trial)) if t.id is not None}


def test_invalid_hp_completes_the_trial_and_random_search_replaces_it(store, tmp_path):
    exp_id = experiment(store, tmp_path, "name: random, max_trials: 2, "
                                         "max_concurrent_trials: 1")
    assert list(trials(store)) == [1]
    ref = start(store, exp_id, 1)
    write(tmp_path, 1, {"kind": "training", "steps": 3, "metrics": {"loss": 1.0}},
          {"kind": "early_exit", "reason": "invalid_hp"},
          {"kind": "early_exit", "reason": "user_requested_stop"})   # the first one counts
    tick(store, exp_id, {ref: JobInfo(ref=ref, state=JobState.RUNNING)})
    t = trials(store)[1]
    assert t.early_exit == "invalid_hp" and not t.state.is_terminal   # until its end
    write(tmp_path, 1, exit_reason="completed", ref=ref)
    tick(store, exp_id, {ref: JobInfo(ref=ref, state=JobState.COMPLETED, exit_code=0)},
         now=1001.0)
    got = trials(store)
    assert got[1].state == TrialState.COMPLETED and got[1].exit_reason == "invalid_hp"
    assert list(got) == [1, 2] and got[2].state == TrialState.QUEUED   # its replacement
    d = views.describe_experiment(store, exp_id)
    assert d["state"] == ExperimentState.ACTIVE and d["progress"] == 0.0
    first = d["trials"][0]
    assert (first["early_exit"], first["searcher_status"]) == ("invalid_hp", "invalid")
    kinds = [e["kind"] for e in views.events_of(store, exp_id)]
    assert kinds.count("early_exit") == 2     # reported, then the trial's end
    # the replacement completes: two trials were needed, one of them counted
    ref2 = start(store, exp_id, 2)
    write(tmp_path, 2, exit_reason="completed", ref=ref2)
    tick(store, exp_id, {ref2: JobInfo(ref=ref2, state=JobState.COMPLETED, exit_code=0)},
         now=1002.0)
    assert views.describe_experiment(store, exp_id)["state"] == ExperimentState.ACTIVE
    assert list(trials(store)) == [1, 2, 3]   # max_trials 2 valid ones: one more


def test_user_requested_stop_completes_the_trial_and_counts_it(store, tmp_path):
    exp_id = experiment(store, tmp_path, "name: single")
    ref = start(store, exp_id, 1)
    write(tmp_path, 1, {"kind": "early_exit", "reason": "user_requested_stop"},
          exit_reason="completed", ref=ref)
    tick(store, exp_id, {ref: JobInfo(ref=ref, state=JobState.COMPLETED, exit_code=0)})
    d = views.describe_experiment(store, exp_id)
    assert d["state"] == ExperimentState.COMPLETED
    assert (d["trials"][0]["state"], d["trials"][0]["exit_reason"]) == \
        (TrialState.COMPLETED, "user_requested_stop")


def test_a_bad_early_exit_is_an_event_and_the_trial_completes_as_usual(store, tmp_path):
    exp_id = experiment(store, tmp_path, "name: single")
    ref = start(store, exp_id, 1)
    write(tmp_path, 1, {"kind": "early_exit", "reason": "bored"},
          exit_reason="completed", ref=ref)
    tick(store, exp_id, {ref: JobInfo(ref=ref, state=JobState.COMPLETED, exit_code=0)})
    t = trials(store)[1]
    assert t.state == TrialState.COMPLETED and t.exit_reason == "completed"
    warnings = [e["message"] for e in views.events_of(store, exp_id)
                if e["kind"] == "warning"]
    assert any("'bored'" in w for w in warnings)


def test_metadata_and_alerts_reach_describe_and_the_event_log(store, tmp_path):
    exp_id = experiment(store, tmp_path, "name: single")
    ref = start(store, exp_id, 1)
    running = {ref: JobInfo(ref=ref, state=JobState.RUNNING)}
    write(tmp_path, 1, {"kind": "metadata", "metadata": {"a": 1}},
          {"kind": "metadata", "metadata": {"b": {"quote": "it's \"x\""}}},  # replaces
          {"kind": "alert", "title": "loss", "description": "went up", "level": "warn"})
    tick(store, exp_id, running)
    d = views.trial_detail(store, 1)
    assert d["metadata"] == {"b": {"quote": "it's \"x\""}}
    alerts = [e for e in views.events_of(store, exp_id) if e["kind"] == "alert"]
    assert alerts == [{"time": 1000.0, "kind": "alert", "message": "[warn] loss: went up",
                       "data": {"level": "warn", "title": "loss", "description": "went up"},
                       "trial_id": 1}]
    assert [e for e in d["events"] if e["kind"] == "alert"][0]["data"]["level"] == "warn"
    assert views.describe_experiment(store, exp_id)["trials"][0]["metadata"] == \
        {"b": {"quote": "it's \"x\""}}


def checkpoint(tmp_path: Path, trial_id: int, steps: int) -> tuple[str, Path]:
    uid = str(uuid.uuid4())
    d = trial_dir(tmp_path, trial_id) / "checkpoints" / uid
    d.mkdir(parents=True)
    (d / "metadata.json").write_text(json.dumps({"steps_completed": steps}))
    write(tmp_path, trial_id, {"kind": "checkpoint", "steps": steps, "uuid": uid})
    return uid, d


def test_a_deleted_checkpoint_is_marked_removed_and_no_longer_offered(store, tmp_path):
    exp_id = experiment(store, tmp_path, "name: single")
    ref = start(store, exp_id, 1)
    running = {ref: JobInfo(ref=ref, state=JobState.RUNNING)}
    old, _ = checkpoint(tmp_path, 1, 5)
    new, new_dir = checkpoint(tmp_path, 1, 10)
    tick(store, exp_id, running)
    assert trials(store)[1].latest_checkpoint == new
    # the job hid it and recorded it, and died before removing its files
    hidden = new_dir.parent / f".deleted-{new}"
    new_dir.rename(hidden)
    write(tmp_path, 1, {"kind": "checkpoint_deleted", "uuid": new})
    out = tick(store, exp_id, running, now=1001.0)
    assert out.delete == {new: str(hidden)}
    with store.session() as s:
        ck = s.get(Checkpoint, new)
        assert ck is not None and ck.state == CheckpointState.DELETING
    t = trials(store)[1]
    assert t.latest_checkpoint == old
    assert views.describe_experiment(store, exp_id)["trials"][0]["best_checkpoint"] == old
    # the daemon removes what was left after the commit, as for garbage collection
    Daemon(store, ClusterConfig(), backend=None).delete_checkpoints(out.delete)  # type: ignore[arg-type]
    assert not hidden.exists()
    with store.session() as s:
        ck = s.get(Checkpoint, new)
        assert ck is not None and ck.state == CheckpointState.DELETED
    # a replayed line, and a uuid that is not this trial's, change nothing
    write(tmp_path, 1, {"kind": "checkpoint_deleted", "uuid": new},
          {"kind": "checkpoint_deleted", "uuid": "not-a-checkpoint"})
    assert tick(store, exp_id, running, now=1002.0).delete == {}
    warnings = [e["message"] for e in views.events_of(store, exp_id)
                if e["kind"] == "warning"]
    assert any("not-a-checkpoint" in w for w in warnings)
    # the last one deleted too: the trial has no checkpoint to resume from
    write(tmp_path, 1, {"kind": "checkpoint_deleted", "uuid": old})
    tick(store, exp_id, running, now=1003.0)
    assert trials(store)[1].latest_checkpoint is None
