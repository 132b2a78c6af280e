"""Training lengths and periods for ``Trainer.fit``: ``Batch(n)`` and ``Epoch(n)``.

Owns: the two unit types (and Determined's base of both, ``TrainUnit``), their conversion
to a number of batches (a length), and when a period or a schedule falls (``due``). As
Determined's, a unit's value is an int (a length, or a period: every ``n``) or a container
of steps (a schedule: ``Batch([1, 5, 10])`` falls at batches 1, 5 and 10; a schedule is
no length).
Must not: import torch (the CLI and the test-mode helper import this package).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any

from dethpc.common.errors import DethpcError


@dataclass(frozen=True)
class TrainUnit:
    """Determined's base of ``Batch`` and ``Epoch``: ``value`` units (an int), or the
    steps of a schedule (a container of ints)."""

    value: int | Container[int]

    def should_stop(self, step_num: int) -> bool:
        """An int value: True at every multiple of ``value`` (a period's boundary), never
        at step 0, always for a ``value`` below 1; a container: True at the steps it holds
        (Determined's rules)."""
        if not isinstance(self.value, int):
            return step_num in self.value
        if self.value < 1:
            return True
        return step_num != 0 and step_num % self.value == 0

    def batches(self, batches_per_epoch: int) -> int:
        raise DethpcError(f"{type(self).__name__} is not a length: use Batch(n) or Epoch(n)")

    def due(self, batches: int, batches_per_epoch: int) -> bool:
        """Does this period (or schedule) fall after batch ``batches`` (a 1-based count of
        the batches trained)? Never for the base class (Determined's Trainer only counts
        a ``Batch`` or an ``Epoch``)."""
        return False

    def require_length(self) -> int:
        """The int value; ``DethpcError`` for a schedule (no length, as Determined's) and
        for a value below 1 (Determined's ``fit`` then trains, validates and checkpoints
        nothing, silently; refused here, loudly)."""
        if not isinstance(self.value, int):
            raise DethpcError(f"{self!r} is a schedule of steps, not a length: max_length "
                              f"must be Batch(int) or Epoch(int) (as Determined requires)")
        if self.value < 1:
            raise DethpcError(f"{self!r} is no training length: max_length must be at "
                              "least 1 (a value below 1 is a period's: every step)")
        return self.value


@dataclass(frozen=True)
class Batch(TrainUnit):
    """A length in batches (optimizer steps of the global batch)."""

    def __post_init__(self) -> None:
        _check(self.value, "Batch")

    def batches(self, batches_per_epoch: int) -> int:
        return self.require_length()

    def due(self, batches: int, batches_per_epoch: int) -> bool:
        return self.should_stop(batches)


@dataclass(frozen=True)
class Epoch(TrainUnit):
    """A length in passes over the training data."""

    def __post_init__(self) -> None:
        _check(self.value, "Epoch")

    def batches(self, batches_per_epoch: int) -> int:
        return self.require_length() * batches_per_epoch

    def due(self, batches: int, batches_per_epoch: int) -> bool:
        """At the last batch of an epoch whose 1-based number the period or schedule
        holds (Determined's Trainer checks an ``Epoch`` at the end of each epoch)."""
        epochs, within = divmod(batches, batches_per_epoch)
        return within == 0 and self.should_stop(epochs)


def _check(value: Any, name: str) -> None:
    """An int n, or a container of steps (not a string; its steps are not checked:
    Determined asks a container only whether it holds a step). As Determined's, an n
    below 1 is a period of every step (``should_stop``); it is no length
    (``require_length``)."""
    if isinstance(value, Container) and not isinstance(value, str | bytes | int):
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise DethpcError(f"{name}(n) needs an int n, got {value!r} (or a schedule: "
                          f"a container of steps, {name}([1, 5, 10]))")


def as_unit(value: TrainUnit | int | None) -> TrainUnit | None:
    """Accept a plain int as a number of batches."""
    if value is None or isinstance(value, Batch | Epoch):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return Batch(value)   # dethpc's own shorthand (Determined's fit takes units only)
    raise DethpcError(f"a length must be Batch(n), Epoch(n) or an int of batches >= 1, "
                      f"got {value!r}")


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
        if key in ("batches", "epochs"):
            # a config period is a number (Determined's schema); schedules are fit()'s
            name = "Batch" if key == "batches" else "Epoch"
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DethpcError(f"{field}.{key}: {name}(n) needs an int n >= 1, "
                                  f"got {value!r}")
            return Batch(value) if key == "batches" else Epoch(value)
        if key == "records":
            raise DethpcError(f"{field}: lengths in records are not supported by the PyTorch "
                              "Trainer; use batches or epochs")
    raise DethpcError(f"{field}: expected {{batches: N}} or {{epochs: N}}, got {raw!r}")
