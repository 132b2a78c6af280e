"""Synchronous successive halving's rules, for the drivers that run rungs one at a time
(submitit's; issue 48).

Owns: ``rung_steps`` (the rungs' lengths: 1, eta, eta**2 validation periods -- dethpc's
rungs at 1/4/16 validation periods of 4 steps: 4, 16, 64 steps) and ``promote`` (the best
``max(1, n // eta)`` trials of a rung, ties broken by the trial's number).
Must not: import a system under test, or do anything but arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping

#: the reduction factor (dethpc's ``divisor``)
ETA = 4


def rung_steps(validate_every: int, rungs: int = 3, eta: int = ETA) -> list[int]:
    """The length of each rung in steps."""
    if validate_every < 1 or rungs < 1 or eta < 2:
        raise ValueError(f"validate_every {validate_every} and rungs {rungs} must be >= 1, "
                         f"eta {eta} >= 2")
    return [validate_every * eta ** r for r in range(rungs)]


def promote(losses: Mapping[int, float], eta: int = ETA) -> list[int]:
    """The trials that go on to the next rung (sorted), from the rung's losses (smaller
    is better): the best ``max(1, len // eta)``; none of none."""
    ranked = sorted(losses, key=lambda i: (losses[i], i))
    return sorted(ranked[:max(1, len(ranked) // eta)]) if ranked else []
