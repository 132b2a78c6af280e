"""Determined's ``det.pytorch.samplers``: refused on dethpc.

Owns: stand-ins for Determined's samplers (repeat, skip, shard, reproducible shuffle):
using one says what to do instead. dethpc's Trainer rebuilds each loader with a seeded
``torch.utils.data.DistributedSampler`` and resumes it at the exact batch by itself
(``dethpc.pytorch._data``); outside the Trainer, torch's own samplers do the same jobs.
Must not: import torch.
"""

from __future__ import annotations

from dethpc.core._refused import module_getattr, refused_class

_MOD = "determined.pytorch.samplers"

DistributedBatchSampler = refused_class(f"{_MOD}.DistributedBatchSampler")
DistributedSampler = refused_class(f"{_MOD}.DistributedSampler")
RepeatBatchSampler = refused_class(f"{_MOD}.RepeatBatchSampler")
RepeatSampler = refused_class(f"{_MOD}.RepeatSampler")
ReproducibleShuffleBatchSampler = refused_class(f"{_MOD}.ReproducibleShuffleBatchSampler")
ReproducibleShuffleSampler = refused_class(f"{_MOD}.ReproducibleShuffleSampler")
SkipBatchSampler = refused_class(f"{_MOD}.SkipBatchSampler")
SkipSampler = refused_class(f"{_MOD}.SkipSampler")

#: any other public name of Determined's module refuses too
__getattr__ = module_getattr(_MOD)
