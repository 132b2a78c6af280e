"""Training lengths for ``Trainer.fit``: ``Batch(n)`` and ``Epoch(n)``.

Owns: the two length types (and Determined's base of both, ``TrainUnit``) and their
conversion to a number of batches.
Must not: import torch (the CLI and the test-mode helper import this package).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dethpc.common.errors import DethpcError


@dataclass(frozen=True)
class TrainUnit:
    """Determined's base of ``Batch`` and ``Epoch``: a length of ``value`` units."""

    value: int

    def should_stop(self, step_num: int) -> bool:
        """True at every multiple of ``value`` (a period's boundary), never at step 0;
        always True for a ``value`` below 1 (Determined's rule)."""
        if self.value < 1:
            return True
        return step_num != 0 and step_num % self.value == 0

    def batches(self, batches_per_epoch: int) -> int:
        raise DethpcError(f"{type(self).__name__} is not a length: use Batch(n) or Epoch(n)")


@dataclass(frozen=True)
class Batch(TrainUnit):
    """A length in batches (optimizer steps of the global batch)."""

    def __post_init__(self) -> None:
        _check(self.value, "Batch")

    def batches(self, batches_per_epoch: int) -> int:
        return self.value


@dataclass(frozen=True)
class Epoch(TrainUnit):
    """A length in passes over the training data."""

    def __post_init__(self) -> None:
        _check(self.value, "Epoch")

    def batches(self, batches_per_epoch: int) -> int:
        return self.value * batches_per_epoch


def _check(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DethpcError(f"{name}(n) needs an int n >= 1, got {value!r}")


def as_unit(value: TrainUnit | int | None) -> TrainUnit | None:
    """Accept a plain int as a number of batches."""
    if value is None or isinstance(value, Batch | Epoch):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Batch(value)
    raise DethpcError(f"a length must be Batch(n), Epoch(n) or an int of batches, got {value!r}")


def from_config(raw: Any, field: str) -> TrainUnit | None:
    """``{batches: 100}`` / ``{epochs: 2}`` from an experiment config field, or None.

    A length of 0 (Determined's default ``min_validation_period: {batches: 0}``, which
    its examples write out, e.g. ``deepspeed/dcgan``) is no period, as the config layer
    reads it (``dethpc.config.experiment._period``)."""
    if raw is None:
        return None
    if isinstance(raw, Mapping) and len(raw) == 1:
        (key, value), = raw.items()
        if key in ("batches", "epochs") and value == 0 and not isinstance(value, bool):
            return None
        try:
            if key == "batches":
                return Batch(value)
            if key == "epochs":
                return Epoch(value)
        except DethpcError as exc:
            raise DethpcError(f"{field}.{key}: {exc}") from None
        if key == "records":
            raise DethpcError(f"{field}: lengths in records are not supported by the PyTorch "
                              "Trainer; use batches or epochs")
    raise DethpcError(f"{field}: expected {{batches: N}} or {{epochs: N}}, got {raw!r}")
