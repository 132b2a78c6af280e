"""Determined's data helpers of ``det.pytorch``: ``DataLoader``, ``TorchData``,
``to_device`` and ``data_length``.

Owns: ``DataLoader``, torch's own ``DataLoader`` under Determined's name (the same
arguments), so that ``build_training_data_loader`` may return one: the Trainer rebuilds
it per epoch with a seeded, sharded sampler (``dethpc.pytorch._data``) as it does any
torch loader; ``get_data_loader()`` gives it back for Determined's defaults, and for
``repeat``/``skip``/``num_replicas`` a loader over Determined's sampler chain
(``dethpc.pytorch.samplers.adapt_batch_sampler``), for code outside the Trainer. ``to_device`` moves
nested tensors (numpy arrays become tensors) to a device; ``data_length`` counts a
batch's records.
Must not: shard or seed data (``_data`` does), or touch the model or files.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.utils.data

from dethpc.common.errors import DethpcError

log = logging.getLogger(__name__)

#: Determined's type of what a batch may hold
TorchData = dict[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor


class DataLoader(torch.utils.data.DataLoader):  # type: ignore[type-arg]
    """Determined's ``det.pytorch.DataLoader``: a torch ``DataLoader`` (the Trainer shards,
    seeds and resumes it)."""

    def get_data_loader(self, repeat: bool = False, skip: int = 0, num_replicas: int = 1,
                        rank: int = 0) -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
        """This loader for Determined's defaults; else, as Determined's, a loader whose
        batch sampler is this one's repeated, sharded across ``num_replicas`` and skipping
        ``skip`` of this rank's batches (``adapt_batch_sampler``). The Trainer does not
        need it: it shards, seeds and resumes the loader itself."""
        if not (repeat or skip or num_replicas != 1 or rank != 0):
            return self
        from dethpc.pytorch.samplers import adapt_batch_sampler

        if not isinstance(self.batch_sampler, torch.utils.data.BatchSampler):
            raise DethpcError("get_data_loader(repeat=, skip=, num_replicas=) needs a "
                              "DataLoader with a batch_size (automatic batching)")
        extra: dict[str, Any] = {}
        if self.num_workers > 0:
            extra = {"prefetch_factor": self.prefetch_factor,
                     "persistent_workers": self.persistent_workers,
                     "multiprocessing_context": self.multiprocessing_context}
        return torch.utils.data.DataLoader(
            self.dataset, batch_sampler=adapt_batch_sampler(
                self.batch_sampler, repeat=repeat, skip=skip, num_replicas=num_replicas,
                rank=rank),
            num_workers=self.num_workers, collate_fn=self.collate_fn,
            pin_memory=self.pin_memory, timeout=self.timeout,
            worker_init_fn=self.worker_init_fn, generator=self.generator, **extra)


def to_device(data: Any, device: torch.device | str,
              warned_types: set[type] | None = None) -> Any:
    """``data`` with every tensor (and numpy array of numbers) moved to ``device``, in the
    same nesting of dicts, lists and tuples; anything else is left as it is (logged once
    per type)."""
    warned = set() if warned_types is None else warned_types
    if isinstance(data, Mapping):
        return {k: to_device(v, device, warned) for k, v in data.items()}
    if isinstance(data, list):
        return [to_device(v, device, warned) for v in data]
    if isinstance(data, tuple):
        moved = [to_device(v, device, warned) for v in data]
        return type(data)(*moved) if hasattr(data, "_fields") else tuple(moved)
    if type(data).__module__ == "numpy" and getattr(getattr(data, "dtype", None), "kind",
                                                    "") in "fciub":
        return torch.from_numpy(data).to(device)
    mover = getattr(data, "to", None)
    if callable(mover):
        return mover(device)
    if type(data) not in warned and not isinstance(data, str | int | float | bool | None):
        warned.add(type(data))
        log.warning("to_device: %s cannot be moved to %s; left as it is",
                    type(data).__name__, device)
    return data


def data_length(data: Any) -> int:
    """Records in a batch: the length of its first tensor or array, looking into dicts,
    lists and tuples."""
    if isinstance(data, Mapping | list | tuple):
        values = list(data.values()) if isinstance(data, Mapping) else list(data)
        if not values:
            raise DethpcError("data_length: the batch holds no tensor or array")
        return data_length(values[0])
    if hasattr(data, "__len__"):
        return len(data)
    raise DethpcError(f"data_length: cannot count the records of a {type(data).__name__}")
