"""The supervisor's restart rule (``dethpc.common.supervisor.decide``), as a table."""

import pytest

from dethpc.common.supervisor import Action, Policy, decide

P = Policy(backoff_s=1.0, max_backoff_s=60.0, quick_s=30.0, max_quick_failures=5)


@pytest.mark.parametrize(("code", "lived", "ready", "first", "before", "want"), [
    (0, 5.0, True, False, 0, (Action.EXIT, 0.0, 0)),        # clean stop: the supervisor ends
    (0, 1.0, False, True, 0, (Action.EXIT, 0.0, 0)),
    (1, 1.0, False, True, 0, (Action.EXIT, 0.0, 0)),        # first start failed: the starter says
    (-9, 1.0, True, True, 0, (Action.RESTART, 1.0, 1)),     # ready, then killed at once
    (-9, 3600.0, True, False, 3, (Action.RESTART, 1.0, 0)),  # a long run resets the count
    (1, 1.0, False, False, 1, (Action.RESTART, 2.0, 2)),    # doubled
    (1, 1.0, True, False, 3, (Action.RESTART, 8.0, 4)),
    (1, 1.0, True, False, 4, (Action.GIVE_UP, 0.0, 5)),     # the 5th quick failure
])
def test_decide(code, lived, ready, first, before, want):
    d = decide(code, lived, ready=ready, first=first, quick_failures=before, policy=P)
    assert (d.action, d.delay_s, d.quick_failures) == want


def test_the_back_off_is_capped():
    d = decide(1, 1.0, ready=True, first=False, quick_failures=20,
               policy=Policy(max_quick_failures=100))
    assert (d.action, d.delay_s) == (Action.RESTART, 60.0)
