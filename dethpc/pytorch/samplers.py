"""Determined's ``det.pytorch.samplers``: building blocks for a ``DataLoader``'s sampler
chain outside the Trainer (repeat, skip, shard, reproducible shuffle), and
``adapt_batch_sampler`` that chains them.

Owns: samplers that behave as Determined 0.38's (same lengths, same order, the same
seeded NumPy shuffle, so a loader built from them yields the same batches on both;
``tests/local/test_determined_oracle.py`` compares). dethpc's Trainer does not use
them: it rebuilds each loader with a seeded ``DistributedSampler`` and resumes it at the
exact batch itself (``dethpc.pytorch._data``).
Must not: be imported by the Trainer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import numpy as np
from torch.utils.data import BatchSampler, Sampler

__all__ = ["DistributedBatchSampler", "DistributedSampler", "RepeatBatchSampler",
           "RepeatSampler", "ReproducibleShuffleBatchSampler", "ReproducibleShuffleSampler",
           "SkipBatchSampler", "SkipSampler", "adapt_batch_sampler"]


def _len(sampler: Any) -> int:
    if not isinstance(sampler, Sized):
        raise TypeError(f"{type(sampler).__name__} has no length")
    return len(sampler)


def _skipping(source: Any, skip: int) -> Iterator[Any]:
    it = iter(source)
    for _ in range(skip):
        if next(it, _END) is _END:
            return
    yield from it


_END = object()


def _forever(source: Any) -> Iterator[Any]:
    while True:
        yield from source


def _shard(source: Any, size: int, rank: int) -> Iterator[Any]:
    if size == 1:
        yield from source
        return
    for i, item in enumerate(source):
        if i % size == rank:
            yield item


def _shard_len(total: int, size: int, rank: int) -> int:
    return total // size + int(total % size > rank)


class RepeatSampler(Sampler[Any]):
    """The samples of ``sampler`` over and over, without end; its length is one pass."""

    def __init__(self, sampler: Sampler[Any]) -> None:
        self._sampler = sampler

    def __len__(self) -> int:
        return _len(self._sampler)

    def __iter__(self) -> Iterator[Any]:
        return _forever(self._sampler)


class RepeatBatchSampler(BatchSampler):
    """The batches of ``batch_sampler`` over and over, without end; its length is one pass."""

    def __init__(self, batch_sampler: BatchSampler) -> None:  # no BatchSampler.__init__
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return _len(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        return _forever(self.batch_sampler)


class DistributedSampler(Sampler[Any]):
    """Every ``num_workers``-th sample of ``sampler`` from the ``rank``-th: one shard of
    a chain (not torch's stand-alone, shuffling ``DistributedSampler``)."""

    def __init__(self, sampler: Sampler[Any], num_workers: int, rank: int) -> None:
        self._sampler = sampler
        self._num_workers = num_workers
        self._rank = rank

    def __len__(self) -> int:
        return _shard_len(_len(self._sampler), self._num_workers, self._rank)

    def __iter__(self) -> Iterator[Any]:
        return _shard(self._sampler, self._num_workers, self._rank)


class DistributedBatchSampler(BatchSampler):
    """Every ``num_workers``-th batch of ``batch_sampler`` from the ``rank``-th. Over a
    finite sampler whose length the ranks do not divide, the lower ranks get one batch
    more."""

    def __init__(self, batch_sampler: BatchSampler, num_workers: int, rank: int) -> None:
        if rank < 0:
            raise ValueError("rank must be non-negative.")
        if num_workers < 1:
            raise ValueError("num_workers must be greater than zero.")
        if rank >= num_workers:
            raise ValueError("rank must be less than num_workers.")
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.rank = rank

    def __len__(self) -> int:
        return _shard_len(_len(self.batch_sampler), self.num_workers, self.rank)

    def __iter__(self) -> Iterator[Any]:
        return _shard(self.batch_sampler, self.num_workers, self.rank)


class SkipSampler(BatchSampler):
    """The samples of ``sampler`` after the first ``skip``; its length stays the
    sampler's (skip before repeating, to skip once)."""

    def __init__(self, sampler: Any, skip: int) -> None:
        self._sampler = sampler
        self._skip = skip

    def __len__(self) -> int:
        return _len(self._sampler)

    def __iter__(self) -> Iterator[Any]:
        return _skipping(self._sampler, self._skip)


class SkipBatchSampler(BatchSampler):
    """The batches of ``batch_sampler`` after the first ``skip``; its length stays the
    sampler's (skip after sharding: ``skip`` counts this rank's batches)."""

    def __init__(self, batch_sampler: BatchSampler, skip: int) -> None:
        self.batch_sampler = batch_sampler
        self.skip = skip
        self.length = _len(batch_sampler)

    def __len__(self) -> int:
        return _len(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        return _skipping(self.batch_sampler, self.skip)


class _SeededShuffle:
    """One pass of the source, shuffled by a NumPy ``RandomState(seed)`` that advances
    from pass to pass (each epoch another order, the sequence fixed by the seed)."""

    def __init__(self, source: Any, seed: int) -> None:
        self._source = source
        self._rng = np.random.RandomState(seed)

    def __iter__(self) -> Iterator[Any]:
        items = list(self._source)
        self._rng.shuffle(items)
        return iter(items)

    def __len__(self) -> int:
        return _len(self._source)


class ReproducibleShuffleSampler(_SeededShuffle, Sampler[Any]):
    """``sampler``'s samples in a seeded shuffle (shuffle before skipping or repeating)."""

    def __init__(self, sampler: Sampler[Any], seed: int) -> None:
        _SeededShuffle.__init__(self, sampler, seed)


class ReproducibleShuffleBatchSampler(_SeededShuffle, Sampler[Any]):
    """``batch_sampler``'s batches in a seeded shuffle (the batches keep their contents;
    prefer ``ReproducibleShuffleSampler``)."""

    def __init__(self, batch_sampler: BatchSampler, seed: int) -> None:
        _SeededShuffle.__init__(self, batch_sampler, seed)


def adapt_batch_sampler(batch_sampler: BatchSampler, repeat: bool = False, skip: int = 0,
                        num_replicas: int = 1, rank: int = 0) -> BatchSampler:
    """Determined's chain for a loader's batch sampler: repeat (training), then shard
    across ``num_replicas``, then skip ``skip`` of this rank's batches (resume)."""
    if repeat:
        batch_sampler = RepeatBatchSampler(batch_sampler)
    if num_replicas > 1:
        batch_sampler = DistributedBatchSampler(batch_sampler, num_replicas, rank)
    if skip > 0:
        batch_sampler = SkipBatchSampler(batch_sampler, skip)
    return batch_sampler

