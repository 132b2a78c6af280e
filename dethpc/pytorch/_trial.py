"""The Trial API: ``PyTorchTrial`` (what users subclass) and ``PyTorchTrialContext``.

Owns: the abstract trial methods, the context that wraps models, optimizers and
LR schedulers (moving them to the device and into DistributedDataParallel when
the process group has more than one rank), hyperparameter access, the trial
seed (seeded at construction, before the trial builds its model), and
``backward``/``step_optimizer`` helpers.
Must not: run the training loop, touch files, or decide when to stop (Trainer).
"""

from __future__ import annotations

import enum
import logging
import os
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from dethpc.common.errors import DethpcError
from dethpc.core import Context, DistributedContext

log = logging.getLogger(__name__)


class StepMode(enum.Enum):
    STEP_EVERY_BATCH = "batch"
    STEP_EVERY_EPOCH = "epoch"
    MANUAL_STEP = "manual"


@dataclass
class WrappedScheduler:
    scheduler: Any
    step_mode: StepMode


def seed_everything(seed: int) -> None:
    """Seed python, numpy (if installed) and torch (all devices)."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover - numpy ships with torch wheels
        pass
    torch.manual_seed(seed)


def check_world(distributed: DistributedContext, env: Mapping[str, str]) -> None:
    """Refuse a one-process context under a launcher that started several ranks.

    ``dethpc.core.init()`` without ``distributed=`` gives each rank a one-process
    context: every rank would then train alone (no gradient exchange), decide its own
    preemption step and write its own checkpoints into the same directory. That is
    never what a launcher with ``WORLD_SIZE`` > 1 meant, so it is an error here.
    """
    raw = env.get("WORLD_SIZE", "").strip()
    world = int(raw) if raw.isdigit() else 1
    if world > 1 and distributed.size == 1:
        raise DethpcError(
            f"WORLD_SIZE={world} (a launcher started {world} ranks) but this trial context has "
            "one process: build it with dethpc.pytorch.init(), or pass "
            "distributed=dethpc.pytorch.init_distributed() to dethpc.core.init()")


class PyTorchTrialContext:
    """Everything a ``PyTorchTrial`` needs from dethpc; built on a core ``Context``."""

    def __init__(self, core_context: Context, *, hparams: Mapping[str, Any] | None = None,
                 device: torch.device | str | None = None) -> None:
        self._core = core_context
        check_world(core_context.distributed, os.environ)
        self._hparams = dict(core_context.hparams if hparams is None else hparams)
        self.models: list[nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[WrappedScheduler] = []
        self.device = torch.device(device) if device is not None else self._default_device()
        self._seed = self._resolve_seed()
        seed_everything(self._seed)

    # ------------------------------------------------------------ accessors
    @property
    def core(self) -> Context:
        return self._core

    @property
    def distributed(self) -> DistributedContext:
        return self._core.distributed

    def _default_device(self) -> torch.device:
        if torch.cuda.is_available():
            return torch.device("cuda", self.distributed.local_rank % torch.cuda.device_count())
        return torch.device("cpu")

    def _resolve_seed(self) -> int:
        """hparams["seed"] if given, else $DETHPC_TRIAL_SEED, else 0."""
        if "seed" in self._hparams:
            try:
                return int(self._hparams["seed"])
            except (TypeError, ValueError) as exc:
                raise DethpcError(f"hyperparameter seed={self._hparams['seed']!r} is not an "
                                  "integer") from exc
        info_seed = self._core.info.trial_seed
        return int(info_seed) if info_seed is not None else 0

    def get_trial_seed(self) -> int:
        return self._seed

    def get_hparams(self) -> dict[str, Any]:
        return dict(self._hparams)

    def get_hparam(self, name: str) -> Any:
        if name not in self._hparams:
            known = ", ".join(sorted(self._hparams)) or "(none)"
            raise DethpcError(f"hyperparameter {name!r} is not defined; defined: {known}. "
                              "Add it under `hyperparameters:` in the experiment config")
        return self._hparams[name]

    def get_global_batch_size(self) -> int:
        value = self.get_hparam("global_batch_size")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DethpcError(f"hyperparameter global_batch_size must be an int >= 1, "
                              f"got {value!r}")
        return value

    def get_per_slot_batch_size(self) -> int:
        """global_batch_size / number of ranks (must divide evenly)."""
        total, size = self.get_global_batch_size(), self.distributed.size
        if total % size:
            raise DethpcError(f"global_batch_size={total} is not divisible by the {size} "
                              "slots of this trial; change one of them")
        return total // size

    def get_experiment_config(self) -> dict[str, Any]:
        return self._core.info.experiment_config

    def get_data_config(self) -> dict[str, Any]:
        data = self.get_experiment_config().get("data")
        return dict(data) if isinstance(data, Mapping) else {}

    # ------------------------------------------------------------- wrapping
    @property
    def is_ddp(self) -> bool:
        if self.distributed.size <= 1:
            return False
        return bool(torch.distributed.is_available() and torch.distributed.is_initialized())

    def wrap_model(self, model: nn.Module, **ddp_options: Any) -> nn.Module:
        """Move to the device; under DDP (world size > 1) wrap in DistributedDataParallel.

        ``ddp_options`` go to ``DistributedDataParallel`` as they are (and are ignored in
        one process). ``find_unused_parameters=True`` also makes a resumed run
        bit-identical to an uninterrupted one: without it DDP re-orders its gradient
        buckets after each process's first step, so the first step after a resume sums
        the ranks' gradients in another order (differences of about 1e-8 that training
        then carries on); it costs one autograd-graph walk per step (docs/trainer.md).
        """
        model = model.to(self.device)
        if self.is_ddp:
            ids = [self.device.index] if self.device.type == "cuda" else None
            model = nn.parallel.DistributedDataParallel(model, device_ids=ids, **ddp_options)
        self.models.append(model)
        return model

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(self, scheduler: Any,
                          step_mode: StepMode = StepMode.STEP_EVERY_BATCH) -> Any:
        """The Trainer steps it after every batch / epoch, or never (MANUAL_STEP)."""
        self.lr_schedulers.append(WrappedScheduler(scheduler, step_mode))
        return scheduler

    # ---------------------------------------------------------------- steps
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        loss.backward(**kwargs)

    def step_optimizer(self, optimizer: torch.optim.Optimizer,
                       clip_grads: Callable[[Iterator[nn.Parameter]], None] | None = None,
                       auto_zero_grads: bool = True) -> None:
        """Optionally clip, step, then zero the gradients."""
        if clip_grads is not None:
            params = (p for group in optimizer.param_groups for p in group["params"])
            clip_grads(params)
        optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad(set_to_none=True)

    def to_device(self, data: Any) -> Any:
        """Move tensors (nested in lists/tuples/dicts) to the trial's device."""
        if isinstance(data, torch.Tensor):
            return data.to(self.device, non_blocking=True)
        if isinstance(data, Mapping):
            return {k: self.to_device(v) for k, v in data.items()}
        if isinstance(data, list):
            return [self.to_device(v) for v in data]
        if isinstance(data, tuple):
            moved = [self.to_device(v) for v in data]
            return type(data)(*moved) if hasattr(data, "_fields") else tuple(moved)
        return data


class PyTorchTrial(ABC):
    """Subclass this; the ``Trainer`` drives it. Data loaders must be
    ``torch.utils.data.DataLoader`` over a map-style dataset: the Trainer rebuilds
    them with a seeded, sharded sampler so that resume reproduces the data order."""

    @abstractmethod
    def __init__(self, context: PyTorchTrialContext) -> None: ...

    @abstractmethod
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        """One optimizer step; ``batch_idx`` counts batches since the trial began."""

    @abstractmethod
    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        """Metrics of one validation batch; the Trainer averages them over batches."""

    @abstractmethod
    def build_training_data_loader(self) -> torch.utils.data.DataLoader:
        ...

    @abstractmethod
    def build_validation_data_loader(self) -> torch.utils.data.DataLoader:
        ...
