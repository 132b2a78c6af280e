"""Determined's DeepSpeed Trial API on dethpc: ``DeepSpeedTrial``, its context and Trainer.

Owns: ``ModelParallelUnit`` and the two helpers that make one, ``DeepSpeedTrialContext``
(a ``PyTorchTrialContext`` whose models are DeepSpeed engines: ``wrap_model_engine``,
``set_mpu``, the micro-batch getters), the ``DeepSpeedTrial`` base class
(the trial pulls its batches from an iterator and steps its engine itself), ``init()``
and a ``Trainer`` that runs it through ``dethpc.pytorch._trainer.Trainer``'s loop (the
same periods, reporting, callbacks, preemption and stop request), with sharded
checkpoints: every rank calls the trial's ``save`` (``engine.save_checkpoint(path,
tag="model<i>")``) into one ``store_path(shard=True)`` directory, rank 0 adds
``state.pt`` (progress, every rank's RNG state, callbacks) and ``load_data.json``;
resume calls the trial's ``load`` (``engine.load_checkpoint``) on every rank.
Must not: import deepspeed at import time (``wrap_model_engine`` and
``make_deepspeed_mpu`` import it when called), or keep a second training loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from dethpc.common.errors import DethpcError
from dethpc.core import Context, DistributedContext, PreemptMode
from dethpc.pytorch._callback import PyTorchCallback
from dethpc.pytorch._init import trial_context
from dethpc.pytorch._state import capture_rng, restore_rng
from dethpc.pytorch._trainer import (
    STATE_FILE,
    _load_state,
    _mean_metrics,
    _Plan,
    _Progress,
)
from dethpc.pytorch._trainer import Trainer as _PyTorchTrainer
from dethpc.pytorch._trial import PyTorchTrialContext, Reducer

log = logging.getLogger(__name__)

#: ``state.pt`` of a DeepSpeedTrial checkpoint: no model/optimizer keys (the engines'
#: own files hold them), the rest as ``dethpc.pytorch/2``
DS_FORMAT = "dethpc.pytorch.deepspeed/1"


@dataclasses.dataclass
class ModelParallelUnit:
    """Which data-parallel shard this rank is and what it does (Determined's fields)."""

    data_parallel_rank: int
    data_parallel_world_size: int
    should_report_metrics: bool
    should_build_data_loader: bool


def make_data_parallel_mpu(dist_context: DistributedContext) -> ModelParallelUnit:
    """Every rank a data-parallel shard that builds loaders and reports metrics."""
    return ModelParallelUnit(data_parallel_rank=dist_context.get_rank(),
                             data_parallel_world_size=dist_context.get_size(),
                             should_report_metrics=True, should_build_data_loader=True)


def make_deepspeed_mpu(topology: Any) -> ModelParallelUnit:
    """The unit of a DeepSpeed ``PipelineParallelGrid``: loaders on the first and last
    pipeline stage of slice rank 0."""
    stage = topology.get_pipe_parallel_rank()
    edge = stage in (0, topology.get_pipe_parallel_world_size() - 1)
    return ModelParallelUnit(
        data_parallel_rank=topology.get_data_parallel_rank(),
        data_parallel_world_size=topology.get_data_parallel_world_size(),
        should_report_metrics=True,
        should_build_data_loader=topology.get_slice_parallel_rank() == 0 and edge)


_ENGINE_DOES_IT = ("in a DeepSpeedTrial the engine does it: build the optimizer and LR "
                   "scheduler with deepspeed.initialize(), register the engine with "
                   "context.wrap_model_engine(), and call engine.backward(loss) and "
                   "engine.step() in train_batch")


class DeepSpeedTrialContext(PyTorchTrialContext):
    """The context of a ``DeepSpeedTrial``: ``models`` are the wrapped DeepSpeed engines."""

    def __init__(self, core_context: Context, *, hparams: Mapping[str, Any] | None = None,
                 device: torch.device | str | None = None) -> None:
        super().__init__(core_context, hparams=hparams, device=device)
        self._mpu = make_data_parallel_mpu(self.distributed)
        self._called_set_mpu = False
        self._use_pipeline_parallel = False
        self._manual_grad_accumulation = False
        self._train_micro_batch_size_per_gpu: int | None = None
        self._num_micro_batches_per_slot: int | None = None

    # ------------------------------------------------------------- engines
    def wrap_model_engine(self, model: Any) -> Any:
        """Register a DeepSpeed engine (checkpointed and resumed by the Trainer); the
        first one sets the micro-batch size and the gradient accumulation steps."""
        import deepspeed

        model = model.to(self.device)
        if isinstance(model, deepspeed.PipelineEngine):
            self._use_pipeline_parallel = True
            if not self.models:
                self._mpu = make_deepspeed_mpu(model.mpu)
            else:
                log.warning("the MPU is the first wrapped engine's")
        if not self.models:
            self._train_micro_batch_size_per_gpu = int(model.train_micro_batch_size_per_gpu())
            self._num_micro_batches_per_slot = int(model.gradient_accumulation_steps())
        elif int(model.train_micro_batch_size_per_gpu()) != \
                self._train_micro_batch_size_per_gpu:
            log.warning("engine %d has another train micro batch size than the first; "
                        "sample counts follow the first", len(self.models) + 1)
        self.models.append(model)
        return model

    def set_mpu(self, mpu: ModelParallelUnit) -> None:
        """Use a custom model-parallel unit (after ``wrap_model_engine``, once)."""
        if not self.models:
            raise DethpcError("call wrap_model_engine() before set_mpu() (as Determined "
                              "requires)")
        if self._called_set_mpu:
            raise DethpcError("set_mpu() may be called once per trial")
        self._called_set_mpu = True
        self._mpu = mpu

    @property
    def mpu(self) -> ModelParallelUnit:
        return self._mpu

    def disable_auto_grad_accumulation(self) -> None:
        """``train_batch`` runs once per batch (it trains every micro batch itself)."""
        self._manual_grad_accumulation = True

    def disable_dataset_reproducibility_checks(self) -> None:
        """Accept any ``torch.utils.data.DataLoader`` (as ``experimental``'s)."""
        self.experimental.disable_dataset_reproducibility_checks()

    @property
    def use_pipeline_parallel(self) -> bool:
        return self._use_pipeline_parallel

    def get_train_micro_batch_size_per_gpu(self) -> int:
        if self._train_micro_batch_size_per_gpu is None:
            raise DethpcError("call wrap_model_engine() before asking the micro batch size")
        return self._train_micro_batch_size_per_gpu

    def get_num_micro_batches_per_slot(self) -> int:
        if self._num_micro_batches_per_slot is None:
            raise DethpcError("call wrap_model_engine() before asking the micro batches per "
                              "slot")
        return self._num_micro_batches_per_slot

    @property
    def train_micro_batch_size_per_gpu(self) -> int:
        warnings.warn("train_micro_batch_size_per_gpu is deprecated (Determined 0.38.0); use "
                      "get_train_micro_batch_size_per_gpu()", FutureWarning, stacklevel=2)
        return self.get_train_micro_batch_size_per_gpu()

    @property
    def num_micro_batches_per_slot(self) -> int:
        warnings.warn("num_micro_batches_per_slot is deprecated (Determined 0.38.0); use "
                      "get_num_micro_batches_per_slot()", FutureWarning, stacklevel=2)
        return self.get_num_micro_batches_per_slot()

    # ---------------------- what PyTorchTrialContext has and this one has not
    def wrap_model(self, model: Any, **ddp_options: Any) -> Any:
        raise DethpcError(f"DeepSpeedTrialContext.wrap_model: {_ENGINE_DOES_IT}")

    def wrap_optimizer(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        raise DethpcError(f"DeepSpeedTrialContext.wrap_optimizer: {_ENGINE_DOES_IT}")

    def wrap_lr_scheduler(self, lr_scheduler: Any, *args: Any, **kwargs: Any) -> Any:
        raise DethpcError(f"DeepSpeedTrialContext.wrap_lr_scheduler: {_ENGINE_DOES_IT}")

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        raise DethpcError(f"DeepSpeedTrialContext.backward: {_ENGINE_DOES_IT}")

    def step_optimizer(self, optimizer: Any, *args: Any, **kwargs: Any) -> None:
        raise DethpcError(f"DeepSpeedTrialContext.step_optimizer: {_ENGINE_DOES_IT}")


class DeepSpeedTrial(ABC):
    """Determined's ``DeepSpeedTrial``: ``train_batch`` and ``evaluate_batch`` get an
    iterator over the data loader and pull their (micro) batches from it."""

    #: the context class its Trainer builds (Determined's harness reads it)
    trial_context_class: type[DeepSpeedTrialContext] = DeepSpeedTrialContext
    #: None: no controller class runs a trial here, ``det.pytorch.deepspeed.Trainer`` does
    trial_controller_class: type | None = None

    @abstractmethod
    def __init__(self, context: DeepSpeedTrialContext) -> None: ...

    @abstractmethod
    def train_batch(self, dataloader_iter: Iterator[Any] | None, epoch_idx: int,
                    batch_idx: int) -> torch.Tensor | dict[str, Any]:
        """Train one micro batch (``next(dataloader_iter)``), stepping the engine."""

    @abstractmethod
    def build_training_data_loader(self) -> Any:
        """A ``det.pytorch.DataLoader`` of micro batches (``train_micro_batch_size_per_gpu``)."""

    @abstractmethod
    def build_validation_data_loader(self) -> Any:
        """A ``det.pytorch.DataLoader`` for validation."""

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        return {}

    def evaluate_batch(self, dataloader_iter: Iterator[Any] | None,
                       batch_idx: int) -> dict[str, Any]:
        """Metrics of one validation batch (``next(dataloader_iter)``); define this or
        ``evaluate_full_dataset``."""
        raise NotImplementedError

    def evaluate_full_dataset(self, data_loader: torch.utils.data.DataLoader) -> dict[str, Any]:
        """Metrics over the whole validation loader (chief only)."""
        raise NotImplementedError

    def evaluation_reducer(self) -> Reducer | dict[str, Reducer]:
        return Reducer.AVG

    def save(self, context: DeepSpeedTrialContext, path: Path) -> None:
        """Every rank: each engine's ``save_checkpoint(path, tag="model<i>")``."""
        engines: list[Any] = context.models
        for i, engine in enumerate(engines):
            engine.save_checkpoint(str(path), tag=f"model{i}")

    def load(self, context: DeepSpeedTrialContext, load_path: Path) -> None:
        """Every rank: each engine's ``load_checkpoint(load_path, tag="model<i>")``."""
        engines: list[Any] = context.models
        for i, engine in enumerate(engines):
            found, _client = engine.load_checkpoint(str(load_path), tag=f"model{i}")
            if found is None:
                raise DethpcError(f"no DeepSpeed checkpoint model{i} in {load_path}")

    def get_batch_length(self, batch: Any) -> int:
        from dethpc.pytorch._loader import data_length

        return data_length(batch)


class Trainer(_PyTorchTrainer):
    """Drives a ``DeepSpeedTrial`` through the PyTorch Trainer's loop."""

    _trial_base = DeepSpeedTrial

    def __init__(self, trial: DeepSpeedTrial, context: DeepSpeedTrialContext) -> None:
        super().__init__(trial, context)  # type: ignore[arg-type]
        self.ds_trial = trial
        self.ds_context = context

    def _micro(self) -> int:
        return self.ds_context.get_num_micro_batches_per_slot() if self.context.models else 1

    def _data_shard(self) -> tuple[int, int]:
        mpu = self.ds_context.mpu
        return mpu.data_parallel_rank, mpu.data_parallel_world_size

    def _batches_per_epoch(self) -> int:
        micro = self._train_data.batches_per_epoch
        bpe = micro // self._micro()
        if bpe == 0:
            raise DethpcError(f"the training loader has {micro} micro batches per rank, fewer "
                              f"than the {self._micro()} gradient accumulation steps of a batch")
        return bpe

    def _train_items(self, epoch: int, offset: int) -> Iterable[Any]:
        micro = self._micro()
        it = iter(self._train_data.epoch(epoch, offset * micro))
        for _ in range(self._batches_per_epoch() - offset):
            yield it

    def _call_train_batch(self, item: Any, epoch: int, batch_idx: int) -> Any:
        calls = 1 if (self.ds_context._manual_grad_accumulation
                      or self.ds_context.use_pipeline_parallel) else self._micro()
        rows = []
        for _ in range(calls):
            metrics = self.ds_trial.train_batch(item, epoch, batch_idx)
            if isinstance(metrics, torch.Tensor):
                metrics = {"loss": metrics}
            if not isinstance(metrics, Mapping):
                raise DethpcError(f"train_batch() must return a dict of metrics, got "
                                  f"{type(metrics).__name__}")
            rows.append(metrics)
        return _mean_metrics(rows)

    def _validation_items(self) -> Iterable[Any]:
        loader = self._val_data.epoch(0)
        count = len(loader)
        if self.ds_context.use_pipeline_parallel:
            count //= self._micro()
        it = iter(loader)
        for _ in range(count):
            yield it

    def _call_evaluate_batch(self, item: Any, batch_idx: int) -> Any:
        return self.ds_trial.evaluate_batch(item, batch_idx)

    # ---------------------------------------------------------- checkpoints
    def _checkpoint(self, plan: _Plan) -> str:
        self.progress.last_checkpoint = self.progress.batches
        rngs = self.dist.allgather(capture_rng())
        state: dict[str, Any] = {
            "format": DS_FORMAT,
            "callbacks": {name: cb.state_dict() for name, cb in self.callbacks.items()},
            "progress": asdict(self.progress),
            "rng": rngs,
        }
        self._hooks("on_checkpoint_save_start", state)
        meta = {"steps_completed": plan.steps(self.progress.batches),
                "batches_trained": self.progress.batches, "format": DS_FORMAT,
                "framework": f"torch-{torch.__version__}", "world_size": self.dist.size}
        with self.core.checkpoint.store_path(meta, shard=True) as (path, uuid):
            if self.dist.rank == 0:
                torch.save(state, Path(path) / STATE_FILE)
                self._write_load_data(Path(path))
            self.ds_trial.save(self.ds_context, Path(path))
            for callback in self.callbacks.values():
                callback.on_checkpoint_end(str(path))
                callback.on_checkpoint_write_end(str(path))
        self._last_uuid = uuid
        self._hooks("on_checkpoint_upload_end", uuid=uuid)
        return uuid

    def _restore(self, uuid: str) -> None:
        with self.core.checkpoint.restore_path(uuid) as path:
            state = _load_state(path, uuid, writer="dethpc.pytorch.deepspeed.Trainer",
                                map_location="cpu")
            if state.get("format") != DS_FORMAT:
                raise DethpcError(f"checkpoint {uuid} is {state.get('format')!r}, not a "
                                  f"DeepSpeedTrial's ({DS_FORMAT})")
            self._hooks("on_checkpoint_load_start", state)
            self.ds_trial.load(self.ds_context, Path(path))
        self.progress = _Progress(**state["progress"])
        rngs = state.get("rng") or []
        if len(rngs) == self.dist.size:
            restore_rng(rngs[self.dist.rank])
        else:
            log.warning("checkpoint %s was written by %d rank(s), this run has %d: RNG states "
                        "are not restored", uuid, len(rngs), self.dist.size)
        self._restore_callbacks(state, uuid)


#: what ``deepspeed.init_distributed`` needs to find to skip its discovery (which, with
#: mpi4py installed, calls ``MPI_Init``: fatal in a Slurm step without PMI)
DEEPSPEED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def single_process_env(env: MutableMapping[str, str]) -> bool:
    """A trial of one process that no launcher set up (``python3 ds_trial.py`` on one
    slot): the rendezvous of a world of one on this host, so the user's
    ``deepspeed.initialize`` finds it instead of discovering one through MPI. Nothing
    when a launcher set the world (``WORLD_SIZE``) or the process group is up. Returns
    whether it set anything."""
    import torch.distributed as dist

    if "WORLD_SIZE" in env or (dist.is_available() and dist.is_initialized()):
        return False
    if all(k in env for k in DEEPSPEED_ENV):
        return False
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                       ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port))):
        env.setdefault(key, value)
    return True


@contextlib.contextmanager
def init(*, hparams: Mapping[str, Any] | None = None,
         exp_conf: Mapping[str, Any] | None = None,
         distributed: DistributedContext | None = None,
         enable_tensorboard_logging: bool = True,
         preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
         exit_on_preempt: bool = True) -> Iterator[DeepSpeedTrialContext]:
    """Like Determined's ``det.pytorch.deepspeed.init()``: yields a ``DeepSpeedTrialContext``
    (``exp_conf`` and ``enable_tensorboard_logging`` as ``dethpc.pytorch.init``'s)."""
    del exp_conf, enable_tensorboard_logging
    if distributed is None:
        single_process_env(os.environ)
    with trial_context(DeepSpeedTrialContext, hparams=hparams, distributed=distributed,
                       preempt_mode=preempt_mode, exit_on_preempt=exit_on_preempt) as context:
        yield context
