"""Holds read from a pending job's reason (issue 34 item 4): the words measured on
Slurm 25.11 and those in its source (job_mgr.c, job_state_reason.c)."""

from __future__ import annotations

import pytest

from dethpc.backends.slurm_holds import HoldKind, hold_of


@pytest.mark.parametrize(("reason", "kind"), [
    ("JobHeldAdmin", HoldKind.ADMIN),
    ("JobHeldUser", HoldKind.USER),
    ("job requeued in held state", HoldKind.USER),
    ("JobHoldMaxRequeue", HoldKind.LAUNCH_LIMIT),
    ("launch failed requeued held", HoldKind.LAUNCH_FAILED),
    ("launch failure limit exceeded requeued held", HoldKind.LAUNCH_LIMIT),
    ("Priority", None),
    ("BeginTime", None),
    ("QOSMaxJobsPerUserLimit", None),
    ("", None),
    (None, None),
])
def test_hold_of(reason: str | None, kind: HoldKind | None) -> None:
    hold = hold_of(reason)
    assert (hold.kind if hold else None) is kind


@pytest.mark.parametrize(("reason", "words"), [
    ("JobHeldAdmin", "only an operator may"),
    ("JobHeldUser", "`scontrol release 7_1` lets it run"),
    ("JobHoldMaxRequeue", "`scontrol release 7_1` runs it again"),
    ("launch failed requeued held", "the daemon releases it and it runs elsewhere"),
])
def test_explain(reason: str, words: str) -> None:
    hold = hold_of(reason)
    assert hold is not None and words in hold.explain("7_1")
