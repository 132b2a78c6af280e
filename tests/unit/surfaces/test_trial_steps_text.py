"""``dethpc trial describe``'s steps against the searcher's length: a trial whose own
``fit(max_length=...)`` trains past ``searcher.max_length`` (single, random, grid, as
Determined 0.38) never reads as a fraction above 1."""

from __future__ import annotations

import pytest

from dethpc.surfaces.cli.trial_cmd import steps_text


@pytest.mark.parametrize(("steps", "target", "shown"), [
    (6, 8, "6/8"), (8, 8, "8/8"), (0, 0, "0"), (5, 0, "5"),
    (20, 8, "20 (past searcher.max_length 8: fit(max_length) decides)")])
def test_steps_past_the_searchers_length_name_it_instead_of_a_fraction(
        steps: int, target: int, shown: str) -> None:
    assert steps_text(steps, target) == shown
