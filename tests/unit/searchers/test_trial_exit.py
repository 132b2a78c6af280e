"""The trial-level exit vocabulary (``TrialExit``) and a record's ``TrialStatus``
(issue 46 item 3): one enum each, shared by the searchers and the reconciler; searcher
snapshots keep their values, and a snapshot saved before they were enums restores."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dethpc.common.exitcodes import ExitReason, TrialExit
from dethpc.config.model import AshaVariant, IntHP, Length, SearcherConfig, Unit
from dethpc.searchers import replay
from dethpc.searchers.base import (
    Create,
    Stop,
    TrialRecord,
    TrialStatus,
    check_reason,
    exit_status,
    record_from_json,
    record_to_json,
)
from dethpc.searchers.factory import make_searcher

TREE = {"n": IntHP(1, 64)}


def asha(variant: AshaVariant = AshaVariant.STOPPING) -> Any:
    config = SearcherConfig(name="adaptive_asha", metric="loss", max_trials=8,
                            max_concurrent_trials=8, max_length=Length(Unit.BATCHES, 64),
                            max_rungs=3, divisor=2, mode="standard", variant=variant)
    return make_searcher(config, TREE, seed=3)


@pytest.mark.parametrize(("reason", "status"), [
    (TrialExit.COMPLETED, TrialStatus.COMPLETED),
    (TrialExit.ERRORED, TrialStatus.ERRORED),
    (TrialExit.INVALID_HP, TrialStatus.INVALID),
    (TrialExit.STOPPED, TrialStatus.STOPPED),
    (TrialExit.CANCELLED, TrialStatus.STOPPED),
    (TrialExit.USER_REQUESTED_STOP, TrialStatus.STOPPED),
])
def test_exit_status(reason: TrialExit, status: TrialStatus) -> None:
    assert exit_status(reason) is status


def test_the_reasons_a_searcher_accepts_are_the_values_it_always_accepted() -> None:
    assert [r.value for r in TrialExit] == ["completed", "stopped", "errored", "cancelled",
                                            "invalid_hp", "user_requested_stop"]
    assert check_reason("invalid_hp") is TrialExit.INVALID_HP
    with pytest.raises(ValueError, match="unknown exit reason 'preempted'; allowed: "
                                         "completed, stopped, errored, cancelled"):
        check_reason("preempted")


def test_the_words_a_run_and_a_trial_share() -> None:
    shared = {r.value for r in ExitReason} & {r.value for r in TrialExit}
    assert shared == {"completed", "stopped", "cancelled"}


def test_a_record_saves_its_status_as_the_plain_string() -> None:
    rec = TrialRecord(request_id=1, hparams={}, status=TrialStatus.PROMOTED)
    d = record_to_json(rec)
    assert type(d["status"]) is str and d["status"] == "promoted"
    back = record_from_json(json.loads(json.dumps(d)))
    assert back == rec and back.status is TrialStatus.PROMOTED


def test_an_old_snapshots_record_restores_with_an_enum_status() -> None:
    # the form the store kept before the status was an enum (and still keeps)
    old = {"request_id": 7, "hparams": {"n": 3}, "bracket": 1, "rung": 2,
           "status": "invalid", "metrics": [[16, 0.5]]}
    rec = record_from_json(old)
    assert rec.status is TrialStatus.INVALID and rec.metrics == {16: 0.5}
    assert record_to_json(rec) == old


def test_an_unknown_status_in_a_snapshot_is_refused() -> None:
    with pytest.raises(ValueError, match="'resting'"):
        record_from_json({"request_id": 1, "hparams": {}, "bracket": 0, "rung": 0,
                          "status": "resting", "metrics": []})


@pytest.mark.parametrize("variant", list(AshaVariant))
def test_asha_snapshot_text_restores_and_decides_alike(variant: AshaVariant) -> None:
    s = asha(variant)
    creates = [a for a in s.initial() if isinstance(a, Create)]
    out = s.on_validation(creates[0].request_id, 0.1, creates[0].validate_at[0])
    for c in creates[1:4]:
        out += s.on_validation(c.request_id, 0.9, c.validate_at[0])
    for a in out:
        if isinstance(a, Stop):
            s.on_exited(a.request_id, TrialExit.STOPPED)
    s.on_exited(creates[4].request_id, "errored")       # a plain string still works
    s.on_exited(creates[5].request_id, TrialExit.INVALID_HP)
    text = json.dumps(s.snapshot())                      # what the store keeps
    assert '"status": "' in text and "TrialStatus" not in text
    again = asha(variant)
    again.restore(json.loads(text))
    assert [(r.request_id, r.status) for r in again.trials()] == \
        [(r.request_id, r.status) for r in s.trials()]
    assert all(isinstance(r.status, TrialStatus) for r in again.trials())
    statuses = {r.status for r in again.trials()}
    assert {TrialStatus.ERRORED, TrialStatus.INVALID} <= statuses
    # the same next decisions
    rid = creates[6].request_id
    assert again.on_exited(rid, "completed") == s.on_exited(rid, TrialExit.COMPLETED)


def test_replay_keeps_its_text_form() -> None:
    call = replay.exited(3, TrialExit.STOPPED)
    assert replay.format_call(call) == "exited request=3 reason=stopped"
    assert replay.parse_call("exited request=3 reason=stopped") == call
    assert replay.EVENT_KIND == "searcher"
