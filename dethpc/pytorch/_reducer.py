"""Custom metric reducers: ``MetricReducer``, ``context.wrap_reducer``,
``context.reduce_metrics`` (Determined's ``det.pytorch`` reducer API).

Owns: the ``MetricReducer`` interface (``reset``, ``per_slot_reduce``,
``cross_slot_reduce``), the wrapper that turns a plain function of all values into one
(values from the ranks interleaved back into the order a sharded loader dealt them),
and the set of reducers a trial context holds: reset before each training workload and
each validation, reduced with one allgather across the ranks.
Must not: import torch, or know when the Trainer reduces (the Trainer calls in).
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class MetricReducer(metaclass=abc.ABCMeta):
    """Accumulates values on each rank (through a method of your own, e.g. ``update``),
    reduces them on the rank (``per_slot_reduce``, picklable), then combines the ranks'
    results (``cross_slot_reduce``) into one metric, or a dict of metrics."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Forget the values: called before each training workload and validation."""

    @abc.abstractmethod
    def per_slot_reduce(self) -> Any:
        """This rank's reduction (sent to every rank)."""

    @abc.abstractmethod
    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        """One value (or a dict of them) from every rank's ``per_slot_reduce()``."""


_SKIP = object()


class _FunctionReducer(MetricReducer):
    """``wrap_reducer(fn)``: ``update(value)`` collects, ``fn(all values)`` reduces."""

    def __init__(self, fn: Callable[[list[Any]], Any]) -> None:
        self.fn = fn
        self.values: list[Any] = []

    def reset(self) -> None:
        self.values = []

    def update(self, value: Any) -> None:
        self.values.append(value)

    def per_slot_reduce(self) -> Any:
        return self.values

    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        # a sharded loader deals batch i to rank i % size: reading the ranks' lists
        # round-robin gives the values back in the dataset's order (one update per batch)
        rows = itertools.zip_longest(*per_slot_metrics, fillvalue=_SKIP)
        return self.fn([v for row in rows for v in row if v is not _SKIP])


def _label(reducer: MetricReducer) -> str:
    if isinstance(reducer, _FunctionReducer):
        return f"the reduction function {getattr(reducer.fn, '__name__', reducer.fn)!s}()"
    return f"the MetricReducer {type(reducer).__name__}"


@dataclass(frozen=True)
class WrappedReducer:
    """One reducer a trial context wrapped, with its ``name`` and where it applies (what
    Determined's ``context._wrapped_reducers`` holds and ``run_cross_slot_reduction``
    takes)."""

    reducer: MetricReducer
    name: str | None
    for_training: bool
    for_validation: bool

    def cross_slot_reduce(self, per_slot_metrics: Sequence[Any]) -> Any:
        try:
            return self.reducer.cross_slot_reduce(list(per_slot_metrics))
        except Exception as exc:
            raise ValueError(f"{_label(self.reducer)} (name={self.name!r}) failed in "
                             "cross_slot_reduce()") from exc


def cross_slot_reduction(reducables: Sequence[WrappedReducer],
                         gathered: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """The metrics of ``reducables`` from ``gathered``, one list per slot of each
    reducer's ``per_slot_reduce()`` (in ``reducables``' order): each reducer's values of
    every slot go to its ``cross_slot_reduce``; its result is the metric ``name``, or,
    wrapped without a name, a dict of metrics."""
    metrics: dict[str, Any] = {}
    per_reducer = zip(*gathered, strict=True) if gathered else iter(())
    for wrapped, per_slot in zip(reducables, per_reducer, strict=True):
        value = wrapped.cross_slot_reduce(per_slot)
        if wrapped.name is None:
            if not isinstance(value, dict):
                raise ValueError(f"{_label(wrapped.reducer)} was wrapped without a name, so it "
                                 f"must return a dict of metrics; it returned a "
                                 f"{type(value).__name__}: pass name= for one metric")
            metrics.update(value)
        else:
            if isinstance(value, dict):
                raise ValueError(f"{_label(wrapped.reducer)} was wrapped with "
                                 f"name={wrapped.name!r} but returned a dict: leave name=None "
                                 "to return several metrics, or return one value")
            metrics[wrapped.name] = value
    return metrics


class ReducerSet:
    """The reducers one trial context wrapped, in the order they were wrapped."""

    def __init__(self, allgather: Callable[[Any], list[Any]]) -> None:
        self._allgather = allgather
        self.entries: list[WrappedReducer] = []

    def wrap(self, reducer: Any, name: str | None, for_training: bool,
             for_validation: bool) -> MetricReducer:
        if any(reducer is w.reducer for w in self.entries):
            raise ValueError(f"wrap_reducer() got the same {type(reducer).__name__} twice: "
                             "wrap each reducer once")
        if not isinstance(reducer, MetricReducer):
            if not callable(reducer):
                raise TypeError(f"wrap_reducer() takes a function or a "
                                f"det.pytorch.MetricReducer, got {type(reducer).__name__}")
            reducer = _FunctionReducer(reducer)
        self.entries.append(WrappedReducer(reducer, name, bool(for_training),
                                           bool(for_validation)))
        return reducer

    def reset(self) -> None:
        for w in self.entries:
            try:
                w.reducer.reset()
            except Exception as exc:
                raise ValueError(f"{_label(w.reducer)} (name={w.name!r}) failed in "
                                 "reset()") from exc

    def reduce(self, for_training: bool) -> dict[str, Any]:
        """Every rank calls this together (one allgather when a reducer applies)."""
        chosen = [w for w in self.entries
                  if (w.for_training if for_training else w.for_validation)]
        if not chosen:
            return {}
        mine = []
        for w in chosen:
            try:
                mine.append(w.reducer.per_slot_reduce())
            except Exception as exc:
                raise ValueError(f"{_label(w.reducer)} (name={w.name!r}) failed in "
                                 "per_slot_reduce()") from exc
        return cross_slot_reduction(chosen, self._allgather(mine))
