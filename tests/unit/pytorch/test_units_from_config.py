"""The Trainer's periods from the experiment config (``dethpc.pytorch._units.from_config``).

Determined's config schema allows a length of 0, its default ``min_validation_period`` is
``{batches: 0}`` (no periodic validation), and its own ``examples/deepspeed/dcgan/mnist.yaml``
writes it out: the Trainer must read it as no period (the config layer does), not fail at
``Batch(0)`` in every rank of the job.
"""

from __future__ import annotations

from typing import Any

import pytest

from dethpc.common.errors import DethpcError
from dethpc.pytorch._units import Batch, Epoch, from_config


@pytest.mark.parametrize(("raw", "want"), [
    (None, None),
    ({"batches": 0}, None),
    ({"epochs": 0}, None),
    ({"batches": 5}, Batch(5)),
    ({"epochs": 2}, Epoch(2)),
])
def test_a_period_from_the_config(raw: Any, want: Any) -> None:
    assert from_config(raw, "min_validation_period") == want


@pytest.mark.parametrize(("raw", "says"), [
    ({"batches": -1}, "min_validation_period.batches: Batch(n) needs an int n >= 1, got -1"),
    ({"epochs": 1.5}, "min_validation_period.epochs: Epoch(n) needs an int n >= 1, got 1.5"),
    ({"records": 64}, "lengths in records are not supported"),
    ({"steps": 3}, "expected {batches: N} or {epochs: N}"),
])
def test_a_bad_period_names_the_field_and_the_value(raw: Any, says: str) -> None:
    with pytest.raises(DethpcError) as info:
        from_config(raw, "min_validation_period")
    assert says in str(info.value)
