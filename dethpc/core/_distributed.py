"""Who am I among the processes of a trial, and the few collectives the API needs.

Owns: ``DistributedContext`` (rank, size, local/cross ranks; ``allgather``,
``gather``, ``broadcast``, ``barrier`` of picklable objects) with Determined's
constructors (``DistributedContext(rank=..., ...)``, ``from_torch_distributed``,
``from_deepspeed``, ``from_horovod``; ``from_tf_config`` refused) and its per-node
collectives (``allgather_local``, ``gather_local``, ``broadcast_local``: one collective of
every rank, each keeping its node's part): over ``torch.distributed`` when it is
initialized, else over a TCP star (``_ipc``); ``DummyDistributedContext`` (one
process, identity ops).
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
    """Rank facts and object collectives, as Determined's ``core.DistributedContext``.

    ``DistributedContext(rank=, size=, local_rank=, local_size=, cross_rank=,
    cross_size=, chief_ip=None)`` with ``size > 1`` connects the processes through
    a TCP star on rank 0 (``_ipc``): no torch needed. ``chief_ip`` (else
    ``$DET_CHIEF_IP``, ``$MASTER_ADDR``, localhost) is where rank 0 listens (from
    the first collective on, so building one costs nothing), on
    ``$DETHPC_CORE_PORT`` or a port derived from the Slurm job id (Determined's
    fixed ``pub_port``/``pull_port`` are accepted and ignored; ``port_offset`` is
    added). With ``size == 1`` the collectives are identities.
    """

    def __init__(self, *, rank: int = 0, size: int = 1, local_rank: int = 0,
                 local_size: int = 1, cross_rank: int = 0, cross_size: int = 1,
                 chief_ip: str | None = None, pub_port: int | None = None,
                 pull_port: int | None = None, port_offset: int = 0,
                 force_tcp: bool = False, env: Mapping[str, str] | None = None) -> None:
        del pub_port, pull_port, force_tcp  # Determined's ZMQ details; one TCP port here
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size
        self._star: Any = None
        self._star_args: tuple[str | None, int, Mapping[str, str] | None] | None = None
        if not 0 <= rank < max(1, size):
            from dethpc.common.errors import DethpcError

            raise DethpcError(f"rank {rank} is not within size {size}")
        if size > 1 and type(self)._uses_star():
            self._star_args = (chief_ip, port_offset, env)

    def _connect(self) -> Any:
        """The TCP star, connected at the first collective (every rank meets there)."""
        if self._star is None and self._star_args is not None:
            import dethpc.core._ipc as _ipc

            chief_ip, port_offset, given = self._star_args
            env = os.environ if given is None else given
            port = _ipc.core_port(env, port_offset)
            timeout = _ipc.connect_timeout(env)
            if self.rank == 0:
                self._star = _ipc.StarChief(self.size, port, timeout_s=timeout)
            else:
                # one node: the chief is local (Determined does the same)
                host = ("127.0.0.1" if self.local_size == self.size
                        else _ipc.chief_address(chief_ip, env))
                self._star = _ipc.StarWorker(self.rank, host, port, timeout_s=timeout)
        return self._star

    @classmethod
    def _uses_star(cls) -> bool:
        return True

    def get_rank(self) -> int:
        return self.rank

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_size(self) -> int:
        return self.size

    def get_num_agents(self) -> int:
        """Number of nodes (Determined: agents) this trial runs on."""
        return self.cross_size

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_local_chief(self) -> bool:
        return self.local_rank == 0

    def allgather(self, stuff: T) -> list[T]:
        """Every rank's ``stuff``, in rank order, on every rank."""
        star = self._connect()
        if star is None:
            return [stuff]
        return star.allgather(stuff)  # type: ignore[no-any-return]

    def gather(self, stuff: T) -> list[T] | None:
        """Every rank's ``stuff`` on rank 0 (in rank order); ``None`` on the others."""
        out = self.allgather(stuff)
        return out if self.rank == 0 else None

    def broadcast(self, stuff: T) -> T:
        """Rank 0's ``stuff`` on every rank."""
        star = self._connect()
        if star is None:
            return stuff
        return star.broadcast(stuff)  # type: ignore[no-any-return]

    # ------------------------------------------------ Determined's local collectives
    def _node_parts(self, stuff: Any) -> list[tuple[int, Any]]:
        """``(local_rank, stuff)`` of every rank on this node, in local rank order: one
        collective of every rank (Determined's are per node; see ``allgather_local``)."""
        if self.local_size < 2:
            return [(self.local_rank, stuff)]
        everyone = self.allgather((self.cross_rank, self.local_rank, stuff))
        return sorted((lr, s) for cr, lr, s in everyone if cr == self.cross_rank)

    def allgather_local(self, stuff: T) -> list[T]:
        """Every rank's ``stuff`` of this node, in local rank order, on each of them.

        Unlike Determined's (a ZMQ star per node), this is a collective of every rank of
        the trial, each keeping its own node's part: every rank must call it, as
        ``allgather``. Without other ranks on the node it costs nothing."""
        return [s for _, s in self._node_parts(stuff)]

    def gather_local(self, stuff: T) -> list[T] | None:
        """This node's ``stuff`` on its local chief (``local_rank`` 0), in local rank
        order; ``None`` on the other ranks (every rank must call it)."""
        out = self.allgather_local(stuff)
        return out if self.local_rank == 0 else None

    def broadcast_local(self, stuff: T | None = None) -> T | None:
        """The local chief's ``stuff`` on every rank of its node (every rank must call it)."""
        parts = self._node_parts(stuff)
        return parts[0][1] if parts else stuff

    def barrier(self) -> None:
        self.allgather(None)

    def close(self) -> None:
        self._star_args = None
        if self._star is not None:
            self._star.close()
            self._star = None

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(rank={self.rank}, size={self.size}, "
                f"local_rank={self.local_rank}, cross_rank={self.cross_rank})")

    @classmethod
    def from_torch_distributed(cls, chief_ip: str | None = None, *,
                               env: Mapping[str, str] | None = None) -> DistributedContext:
        """Ranks from torch's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
        ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``GROUP_WORLD_SIZE``), as Determined.

        When torch.distributed is initialized its (gloo) group carries the
        collectives; otherwise the TCP star does, so the process group may be
        initialized before or after this call, or never.
        """
        env = os.environ if env is None else env
        torch = sys.modules.get("torch")
        if torch is not None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                return TorchDistributedContext(env)
        r = _env_ranks(env, "torch.distributed", local_size="LOCAL_WORLD_SIZE",
                       cross_rank="GROUP_RANK", cross_size="GROUP_WORLD_SIZE")
        return cls(rank=r["rank"], size=r["size"], local_rank=r["local_rank"],
                   local_size=r["local_size"], cross_rank=r["cross_rank"],
                   cross_size=r["cross_size"], chief_ip=chief_ip, env=env)

    @classmethod
    def from_deepspeed(cls, chief_ip: str | None = None, *,
                       env: Mapping[str, str] | None = None) -> DistributedContext:
        """Ranks from DeepSpeed's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
        ``LOCAL_SIZE``, ``CROSS_RANK``, ``CROSS_SIZE``), as Determined."""
        env = os.environ if env is None else env
        r = _env_ranks(env, "DeepSpeed", local_size="LOCAL_SIZE",
                       cross_rank="CROSS_RANK", cross_size="CROSS_SIZE")
        return cls(rank=r["rank"], size=r["size"], local_rank=r["local_rank"],
                   local_size=r["local_size"], cross_rank=r["cross_rank"],
                   cross_size=r["cross_size"], chief_ip=chief_ip, env=env)

    @classmethod
    def from_horovod(cls, hvd: Any, chief_ip: str | None = None) -> DistributedContext:
        """Ranks from an initialized ``horovod`` module (``hvd.rank()``, ...)."""
        return cls(rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
                   local_size=hvd.local_size(), cross_rank=hvd.cross_rank(),
                   cross_size=hvd.cross_size(), chief_ip=chief_ip)

    @classmethod
    def from_tf_config(cls) -> DistributedContext:
        """Determined's TensorFlow constructor: refused (no TensorFlow launcher)."""
        from dethpc.core._refused import refuse

        refuse("determined.core.DistributedContext.from_tf_config")

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
                        "as a single process (pass distributed=DistributedContext."
                        "from_torch_distributed() to core.init(), use dethpc.pytorch.init(), or "
                        "initialize the process group before dethpc.core.init())", world)
        return DummyDistributedContext()


def _env_ranks(env: Mapping[str, str], what: str, *, local_size: str, cross_rank: str,
               cross_size: str) -> dict[str, int]:
    """The six rank numbers from ``env``; a clear error naming what is missing."""
    names = {"rank": "RANK", "size": "WORLD_SIZE", "local_rank": "LOCAL_RANK",
             "local_size": local_size, "cross_rank": cross_rank, "cross_size": cross_size}
    out: dict[str, int] = {}
    missing: list[str] = []
    for key, name in names.items():
        raw = env.get(name, "").strip()
        if raw.isdigit():
            out[key] = int(raw)
        else:
            missing.append(name)
    if "size" in out and "local_size" in out and out["local_size"] > 0:
        # dethpc's and torchrun's launchers set these; fill only what follows from the rest
        if "cross_size" not in out:
            out["cross_size"] = max(1, out["size"] // out["local_size"])
            missing.remove(cross_size)
        if "cross_rank" not in out and "rank" in out:
            out["cross_rank"] = out["rank"] // out["local_size"]
            missing.remove(cross_rank)
    if missing:
        from dethpc.common.errors import DethpcError

        raise DethpcError(f"cannot build a {what} DistributedContext: environment variable(s) "
                          f"{', '.join(missing)} not set; start the script through "
                          "python -m dethpc.launch.<launcher> (or the launcher that sets them)")
    return out


class DummyDistributedContext(DistributedContext):
    """The off-cluster / single-process twin."""


class TorchDistributedContext(DistributedContext):
    """Collectives over ``torch.distributed`` (imported lazily).

    Object collectives use a gloo group so that they never touch the GPU, even
    when the default group is NCCL.
    """

    @classmethod
    def _uses_star(cls) -> bool:
        return False

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        import torch.distributed as dist

        from dethpc.common.errors import DethpcError

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

    def allgather(self, stuff: T) -> list[T]:
        out: list[Any] = [None] * self.size
        self._dist.all_gather_object(out, stuff, group=self._group)
        return out

    def broadcast(self, stuff: T) -> T:
        box: list[Any] = [stuff if self.rank == 0 else None]
        self._dist.broadcast_object_list(box, src=0, group=self._group)
        return box[0]  # type: ignore[no-any-return]

    def barrier(self) -> None:
        self._dist.barrier(group=self._group)
