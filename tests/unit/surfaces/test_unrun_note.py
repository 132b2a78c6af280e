"""Table tests: what ``dethpc trial logs`` adds for a trial that ended without output
(``dethpc.surfaces.cli.shared.unrun_note``): its exit reason, as Determined's trial log
carries a failed image pull's message."""

from __future__ import annotations

import pytest

from dethpc.surfaces.cli.shared import unrun_note

PULL = ("the image 'docker.io/badhost/missing.image' could not be pulled: FATAL: manifest "
        "unknown")


@pytest.mark.parametrize(("state", "reason", "printed", "note"), [
    ("ERROR", PULL, False, f"dethpc: trial 3 ended ERROR without job output: {PULL}"),
    ("CANCELED", "experiment killed", False,
     "dethpc: trial 3 ended CANCELED without job output: experiment killed"),
    ("ERROR", PULL, True, None),           # its output says what happened
    ("RUNNING", None, False, None),        # still going: nothing to say yet
    ("QUEUED", "", False, None),
    ("COMPLETED", None, False, None),      # no reason recorded: nothing to add
    ("ERROR", "", False, None),
])
def test_unrun_note(state: str, reason: str | None, printed: bool, note: str | None) -> None:
    assert unrun_note({"id": 3, "state": state, "exit_reason": reason}, printed) == note
