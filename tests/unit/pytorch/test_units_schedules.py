"""``Batch``/``Epoch`` with a container of steps (a schedule), as Determined 0.38.1's
``TrainUnit``: ``Batch([1, 5, 10])`` falls at batches 1, 5 and 10, ``Epoch([2])`` at
the last batch of epoch 2; a schedule is a period of ``fit``, never a length.
``tests/local/test_determined_oracle.py`` (``schedules``) runs the same schedules
under Determined's Trainer and dethpc's."""

from __future__ import annotations

from typing import Any

import pytest

from dethpc.common.errors import DethpcError
from dethpc.pytorch import Batch, Epoch, TrainUnit
from dethpc.pytorch._units import from_config


@pytest.mark.parametrize("steps", [[1, 5, 10], (1, 5, 10), {1, 5, 10}, range(0, 11, 5)])
def test_a_schedule_stops_at_the_steps_it_holds(steps: Any) -> None:
    for unit in (Batch(steps), Epoch(steps), TrainUnit(steps)):
        assert [n for n in range(12) if unit.should_stop(n)] == sorted(set(steps))


def test_due_counts_batches_for_batch_and_whole_epochs_for_epoch() -> None:
    # four batches an epoch: Epoch([2]) falls at batch 8 only, Epoch(2) at 8 and 16
    assert [b for b in range(1, 17) if Batch([3, 8]).due(b, 4)] == [3, 8]
    assert [b for b in range(1, 17) if Epoch([2]).due(b, 4)] == [8]
    assert [b for b in range(1, 17) if Epoch([1, 3]).due(b, 4)] == [4, 12]
    assert [b for b in range(1, 17) if Epoch(2).due(b, 4)] == [8, 16]
    assert [b for b in range(1, 17) if Batch(5).due(b, 4)] == [5, 10, 15]
    assert not TrainUnit(1).due(4, 4)   # only a Batch or an Epoch counts, as Determined's


@pytest.mark.parametrize("unit", [Batch([4, 8]), Epoch((1,))])
def test_a_schedule_is_no_length(unit: TrainUnit) -> None:
    with pytest.raises(DethpcError, match=r"schedule of steps, not a length.*Batch\(int\)"):
        unit.batches(4)


@pytest.mark.parametrize("value", ["12", b"12", 1.5])
def test_neither_an_int_nor_a_container_of_steps_is_refused(value: Any) -> None:
    """A string is a container but holds no steps; a float is neither (Determined's
    ``should_stop`` fails on it at the first batch): refused when built, the message
    naming both forms."""
    with pytest.raises(DethpcError, match=r"needs an int n, got .* \(or a schedule: "
                                          r"a container of steps, Batch\(\[1, 5, 10\]\)\)"):
        Batch(value)


def test_a_value_below_1_is_a_period_of_every_step_and_no_length() -> None:
    """As Determined's ``TrainUnit``: ``Batch(0)`` falls after every batch, ``Epoch(-1)``
    at the end of every epoch; as ``max_length`` it is refused (Determined's ``fit``
    trains nothing then, silently)."""
    assert [b for b in range(1, 9) if Batch(0).due(b, 4)] == list(range(1, 9))
    assert [b for b in range(1, 9) if Epoch(-1).due(b, 4)] == [4, 8]
    with pytest.raises(DethpcError, match="no training length"):
        Batch(0).batches(4)


def test_a_config_period_is_a_number_not_a_schedule() -> None:
    with pytest.raises(DethpcError, match="min_checkpoint_period.batches: Batch"):
        from_config({"batches": [1, 2]}, "min_checkpoint_period")
