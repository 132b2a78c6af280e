"""Who am I among the processes of a trial, and the few collectives the API needs.

Owns: ``DistributedContext`` (rank, size, local/cross ranks; ``allgather``,
``broadcast``, ``barrier`` of picklable objects) over ``torch.distributed`` when
it is initialized, and ``DummyDistributedContext`` (one process, identity ops).
Must not: import torch at module import time (the daemon imports dethpc.core on a
login node without torch), initialize a process group (``dethpc.pytorch`` does),
or know about Slurm beyond reading rank variables.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


def _first_int(env: Mapping[str, str], names: tuple[str, ...], default: int) -> int:
    for name in names:
        raw = env.get(name, "").strip()
        if raw.isdigit():
            return int(raw)
    return default


class DistributedContext:
    """Base and single-process behaviour: rank 0 of 1, collectives are identities."""

    def __init__(self, *, rank: int = 0, size: int = 1, local_rank: int = 0,
                 local_size: int = 1, cross_rank: int = 0, cross_size: int = 1) -> None:
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size

    def get_rank(self) -> int:
        return self.rank

    def get_size(self) -> int:
        return self.size

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    def allgather(self, obj: T) -> list[T]:
        return [obj]

    def broadcast(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank."""
        return obj

    def barrier(self) -> None:
        return None

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(rank={self.rank}, size={self.size}, "
                f"local_rank={self.local_rank}, cross_rank={self.cross_rank})")

    @classmethod
    def from_torch_distributed(cls, env: Mapping[str, str] | None = None) -> DistributedContext:
        """Use the initialized default process group of ``torch.distributed``."""
        return TorchDistributedContext(env)

    @classmethod
    def auto(cls, env: Mapping[str, str] | None = None) -> DistributedContext:
        """torch.distributed when it is imported and initialized, else one process.

        torch is never imported here: if the program did not import it, no
        process group can exist.
        """
        env = os.environ if env is None else env
        torch = sys.modules.get("torch")
        if torch is not None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                return TorchDistributedContext(env)
        world = _first_int(env, ("WORLD_SIZE",), 1)
        if world > 1:
            log.warning("WORLD_SIZE=%d but torch.distributed is not initialized: running "
                        "as a single process (use dethpc.pytorch.init() or initialize the "
                        "process group before dethpc.core.init())", world)
        return DummyDistributedContext()


class DummyDistributedContext(DistributedContext):
    """The off-cluster / single-process twin."""


class TorchDistributedContext(DistributedContext):
    """Collectives over ``torch.distributed`` (imported lazily).

    Object collectives use a gloo group so that they never touch the GPU, even
    when the default group is NCCL.
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        import torch.distributed as dist

        from dethpc.errors import DethpcError

        if not (dist.is_available() and dist.is_initialized()):
            raise DethpcError("torch.distributed is not initialized; call "
                              "torch.distributed.init_process_group() (or use "
                              "dethpc.pytorch.init()) before asking for a distributed context")
        env = os.environ if env is None else env
        rank, size = dist.get_rank(), dist.get_world_size()
        local_rank = _first_int(env, ("LOCAL_RANK", "SLURM_LOCALID"), 0)
        local_size = _first_int(env, ("LOCAL_WORLD_SIZE",), 0) or max(1, size)
        cross_rank = _first_int(env, ("GROUP_RANK", "SLURM_NODEID"), 0)
        super().__init__(rank=rank, size=size, local_rank=local_rank, local_size=local_size,
                         cross_rank=cross_rank, cross_size=max(1, size // max(1, local_size)))
        self._dist = dist
        self._group: Any = None
        if dist.get_backend() != "gloo":
            self._group = dist.new_group(backend="gloo")

    def allgather(self, obj: T) -> list[T]:
        out: list[Any] = [None] * self.size
        self._dist.all_gather_object(out, obj, group=self._group)
        return out

    def broadcast(self, obj: T) -> T:
        box: list[Any] = [obj if self.rank == 0 else None]
        self._dist.broadcast_object_list(box, src=0, group=self._group)
        return box[0]  # type: ignore[no-any-return]

    def barrier(self) -> None:
        self._dist.barrier(group=self._group)
