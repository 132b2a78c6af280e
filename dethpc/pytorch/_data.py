"""Reproducible, resumable, sharded data loading for the Trainer.

Owns: ``EpochLoaders``: from the user's ``DataLoader`` it builds, per epoch, a
loader whose order depends only on (trial seed, epoch) through a
``DistributedSampler`` (one shard per rank, one shard in all when not
distributed), and which can start at batch ``k`` of the epoch (resume).
Every rebuilt loader gets its own seeded ``torch.Generator``, so creating an
iterator never consumes the global torch RNG (which would break bit-identical
resume).
Must not: touch the model, files or the global RNG.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from dethpc.common.errors import DethpcError

log = logging.getLogger(__name__)


class _SkipBatches(Sampler[list[int]]):
    """The batches of ``inner`` from the ``skip``-th on (resume inside an epoch)."""

    def __init__(self, inner: BatchSampler, skip: int) -> None:
        self.inner = inner
        self.skip = skip

    def __iter__(self) -> Iterator[list[int]]:
        return itertools.islice(iter(self.inner), self.skip, None)

    def __len__(self) -> int:
        return max(0, len(self.inner) - self.skip)


class EpochLoaders:
    """Per-epoch loaders rebuilt from a user ``DataLoader``."""

    def __init__(self, loader: Any, *, seed: int, rank: int, size: int, train: bool,
                 what: str) -> None:
        if not isinstance(loader, DataLoader):
            raise DethpcError(f"{what} must return a torch.utils.data.DataLoader, got "
                              f"{type(loader).__name__}")
        if isinstance(loader.dataset, IterableDataset):
            raise DethpcError(f"{what} returned a DataLoader over an IterableDataset; the "
                              "Trainer needs a map-style dataset (with __len__/__getitem__) to "
                              "shard it and to resume at an exact batch")
        if loader.batch_size is None:
            raise DethpcError(f"{what} returned a DataLoader with a custom batch_sampler; pass "
                              "batch_size= (and shuffle=) instead, the Trainer builds the sampler")
        sampler = loader.sampler
        shuffle = isinstance(sampler, RandomSampler)
        if not isinstance(sampler, RandomSampler | SequentialSampler):
            log.warning("%s: custom sampler %s replaced by a seeded DistributedSampler "
                        "(shuffle=%s)", what, type(sampler).__name__, train)
            shuffle = train
        self._loader = loader
        self._seed = seed
        self.batch_size: int = loader.batch_size
        self.drop_last: bool = loader.drop_last
        self.sampler: DistributedSampler[Any] = DistributedSampler(
            loader.dataset, num_replicas=size, rank=rank, shuffle=shuffle, seed=seed,
            drop_last=False)
        self.batches_per_epoch = len(BatchSampler(self.sampler, self.batch_size, self.drop_last))
        if self.batches_per_epoch == 0:
            raise DethpcError(f"{what} yields no batch per epoch on a rank ({len(loader.dataset)} "  # type: ignore[arg-type]
                              f"records, {size} rank(s), batch size {self.batch_size}, "
                              f"drop_last={self.drop_last}); use a smaller batch size")

    def epoch(self, epoch: int, skip: int = 0) -> DataLoader[Any]:
        """The loader of ``epoch``, starting at its ``skip``-th batch."""
        self.sampler.set_epoch(epoch)
        batches = _SkipBatches(BatchSampler(self.sampler, self.batch_size, self.drop_last), skip)
        src = self._loader
        generator = torch.Generator()
        generator.manual_seed((self._seed * 1_000_003 + epoch) % 2**63)
        extra: dict[str, Any] = {}
        if src.num_workers > 0:
            extra = {"prefetch_factor": src.prefetch_factor,
                     "multiprocessing_context": src.multiprocessing_context}
        return DataLoader(src.dataset, batch_sampler=batches, num_workers=src.num_workers,
                          collate_fn=src.collate_fn, pin_memory=src.pin_memory,
                          timeout=src.timeout, worker_init_fn=src.worker_init_fn,
                          generator=generator, **extra)
