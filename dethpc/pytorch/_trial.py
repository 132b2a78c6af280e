"""The Trial API: ``PyTorchTrial`` (what users subclass) and ``PyTorchTrialContext``.

Owns: the abstract trial methods (and Determined's optional ones: served, or refused by
the Trainer when a trial overrides them), the context that wraps models, optimizers,
LR schedulers and a gradient scaler (moving models to the device and into
DistributedDataParallel when the process group has more than one rank), hyperparameter
access, the trial seed (seeded at construction, before the trial builds its model),
``backward``/``step_optimizer`` helpers, the Trainer's position as Determined's context
shows it (``current_train_batch``, ``is_epoch_end``, ...), ``set_stop_requested``,
the TensorBoard path and writer, ``LRScheduler`` (Determined's wrapper and its
``StepMode``), ``Reducer``, custom metric reducers (``wrap_reducer``, ``reduce_metrics``),
Determined's automatic mixed precision (``experimental.use_amp``,
``autocast_forward_pass``) and ``PyTorchExperimentalContext``.
Must not: run the training loop, touch files other than through ``dethpc.core``, or
decide when to stop (Trainer).
"""

from __future__ import annotations

import enum
import logging
import os
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dethpc.common.errors import DethpcError, InvalidExperimentException
from dethpc.core import Context, DistributedContext
from dethpc.core._refused import refused_method
from dethpc.pytorch._reducer import (
    MetricReducer,
    ReducerSet,
    WrappedReducer,
    cross_slot_reduction,
)

log = logging.getLogger(__name__)


class StepMode(enum.Enum):
    """When the Trainer steps an LR scheduler (Determined's ``LRScheduler.StepMode``)."""

    STEP_EVERY_EPOCH = 1
    STEP_EVERY_BATCH = 2
    MANUAL_STEP = 3
    #: with one optimizer step per batch (dethpc has no gradient aggregation): per batch
    STEP_EVERY_OPTIMIZER_STEP = 4


_StepMode = StepMode


class LRScheduler:
    """Determined's ``det.pytorch.LRScheduler``: a scheduler with the step mode (and
    frequency) the Trainer follows; its methods are the scheduler's. ``wrap_lr_scheduler``
    keeps one of these per scheduler in ``context.lr_schedulers``, as Determined's, and
    accepts one in place of a scheduler."""

    StepMode = StepMode

    def __init__(self, scheduler: Any, step_mode: _StepMode, frequency: int = 1) -> None:
        if not isinstance(step_mode, _StepMode):   # as Determined's: a member, not a value
            raise TypeError(f"step_mode must be an LRScheduler.StepMode. Got {type(step_mode)}.")
        self.scheduler = scheduler
        self.step_mode = step_mode
        # MANUAL_STEP never reads it (Determined's takes any value there)
        self.frequency = frequency if step_mode is StepMode.MANUAL_STEP \
            else _check_frequency(frequency)

    def due(self, batches: int, batches_per_epoch: int) -> bool:
        """Step after batch ``batches`` (1-based count of batches trained)?"""
        if self.step_mode in (StepMode.STEP_EVERY_BATCH, StepMode.STEP_EVERY_OPTIMIZER_STEP):
            return batches % self.frequency == 0
        if self.step_mode is StepMode.STEP_EVERY_EPOCH and batches % batches_per_epoch == 0:
            return (batches // batches_per_epoch) % self.frequency == 0
        return False

    def get_last_lr(self) -> list[float]:
        return list(self.scheduler.get_last_lr())

    def state_dict(self) -> dict[str, Any]:
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def step(self, *args: Any, **kwargs: Any) -> None:
        self.scheduler.step(*args, **kwargs)


#: the name this wrapper had before ``context.lr_schedulers`` held Determined's class
WrappedScheduler = LRScheduler


def _check_frequency(frequency: Any) -> int:
    if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
        raise DethpcError(f"LR scheduler frequency must be an int >= 1, got {frequency!r}")
    return frequency


class Reducer(enum.Enum):
    """Determined's built-in reducers of validation metrics: a trial's
    ``evaluation_reducer()`` returns one for every metric, or a dict naming each metric's;
    the Trainer reduces the ``evaluate_batch`` values of every rank with it."""

    AVG = 1
    SUM = 2
    MAX = 3
    MIN = 4


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

    #: refuse a one-process context under a launcher of several ranks (``check_world``);
    #: a context that only loads a checkpoint (``CheckpointLoadContext``) is one process
    _one_process_launch_check = True

    def __init__(self, core_context: Context, *, hparams: Mapping[str, Any] | None = None,
                 device: torch.device | str | None = None) -> None:
        self._core = core_context
        if self._one_process_launch_check:
            check_world(core_context.distributed, os.environ)
        self._hparams = dict(core_context.hparams if hparams is None else hparams)
        #: the experiment config given by hand (init(exp_conf=) off-cluster, a loaded
        #: checkpoint's), instead of the trial's
        self._exp_conf: dict[str, Any] | None = None
        self.models: list[nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[LRScheduler] = []
        self.device = torch.device(device) if device is not None else self._default_device()
        self._seed = self._resolve_seed()
        seed_everything(self._seed)
        #: the torch profiler of set_profiler() (None: none), as Determined's
        self.profiler: Any = None
        self.experimental = PyTorchExperimentalContext(self)
        self._scaler: Any = None
        self._reducers = ReducerSet(self._core.distributed.allgather)
        self._batch_warned = False
        self._stop_requested = False
        self._tensorboard_logging = True
        self._writer: Any = None
        #: where the Trainer is (it sets these): batches trained, batches per epoch,
        #: batches trained when this run started
        self._batches = 0
        self._batches_per_epoch = 0
        self._initial_batch = 0
        #: whether the Trainer has begun a batch (the position getters answer from then on)
        self._training = False
        #: seconds this process spent where DDP waits for the other ranks: in
        #: ``backward()`` (the gradient all-reduce) and at the head of a wrapped model's
        #: forward (its buffer broadcast from rank 0, before the module runs); the Trainer
        #: leaves them out of a rank's busy time (the straggler view)
        self._sync_s = 0.0

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
        info_seed = self._core.job_info.trial_seed
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
        """``global_batch_size`` rounded down to a multiple of the slots (as Determined:
        the batch size the ranks train together)."""
        return self._batch_sizes()[1]

    def get_per_slot_batch_size(self) -> int:
        """``global_batch_size`` // slots. As Determined, a global batch size that the
        slots do not divide is rounded down with a warning (once), and one smaller than
        the number of slots is an error."""
        return self._batch_sizes()[0]

    def _batch_sizes(self) -> tuple[int, int]:
        """(per slot, effective global): Determined's ``calculate_batch_sizes``."""
        total = self.get_hparam("global_batch_size")
        if isinstance(total, bool) or not isinstance(total, int) or total < 1:
            raise DethpcError(f"hyperparameter global_batch_size must be an int >= 1, "
                              f"got {total!r}")
        slots = max(self.distributed.size, 1)
        if total < slots:
            raise DethpcError(f"global_batch_size={total} is smaller than the {slots} slots "
                              "of this trial: set it to at least the number of slots")
        per_slot = total // slots
        if per_slot * slots != total and not self._batch_warned:
            self._batch_warned = True
            log.warning("global_batch_size changed from %d to %d to divide equally across "
                        "%d slots", total, per_slot * slots, slots)
        return per_slot, per_slot * slots

    def get_experiment_config(self) -> dict[str, Any]:
        """The trial's experiment config; off-cluster the ``exp_conf`` given to
        ``det.pytorch.init()`` (Determined's local training), else ``{}``."""
        if self._exp_conf is not None:
            return dict(self._exp_conf)
        return self._core.job_info.experiment_config

    def get_trial_id(self) -> int:
        """The trial's id (0 off-cluster)."""
        return self._core.job_info.trial_id or 0

    def get_experiment_id(self) -> int:
        """The experiment's id (0 off-cluster)."""
        return self._core.job_info.experiment_id or 0

    # ------------------------------------------------- the Trainer's position
    def get_initial_batch(self) -> int:
        """Batches trained when this run started (0, or the checkpoint resumed from)."""
        return self._initial_batch

    def _position(self, name: str) -> tuple[int, int]:
        """(batch index, batches per epoch); as Determined's, an error before the Trainer
        trained a batch (a loaded trial's context, a trial's ``__init__``)."""
        if not self._training or not self._batches_per_epoch:
            raise DethpcError(f"{name}(): training hasn't started (the Trainer sets the "
                              "position when it trains the first batch)")
        return self._batches, self._batches_per_epoch

    def current_train_batch(self) -> int:
        """Batches trained so far (the index of the batch being trained)."""
        return self._position("current_train_batch")[0]

    def current_train_epoch(self) -> int:
        """The epoch being trained (0-based)."""
        batch, per = self._position("current_train_epoch")
        return batch // per

    def is_epoch_start(self) -> bool:
        """True when the batch being trained is the first of an epoch."""
        batch, per = self._position("is_epoch_start")
        return batch % per == 0

    def is_epoch_end(self) -> bool:
        """True when the batch being trained is the last of an epoch."""
        batch, per = self._position("is_epoch_end")
        return (batch + 1) % per == 0

    # ------------------------------------------------------------- stopping
    def get_stop_requested(self) -> bool:
        return self._stop_requested

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask the Trainer to stop after the current batch: it checkpoints, records an
        early exit (``user_requested_stop``) and returns from ``fit``."""
        if not isinstance(stop_requested, bool):
            raise DethpcError(f"set_stop_requested() takes a bool, got {stop_requested!r}")
        self._stop_requested = stop_requested

    # ----------------------------------------------------------- TensorBoard
    def get_tensorboard_path(self) -> Path:
        """The trial's TensorBoard directory (``core_context.train.get_tensorboard_path``)."""
        return self._core.train.get_tensorboard_path()

    def get_tensorboard_writer(self) -> Any:
        """A ``torch.utils.tensorboard.SummaryWriter`` on ``get_tensorboard_path()``
        (one per process; needs the ``tensorboard`` package)."""
        if self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise DethpcError("get_tensorboard_writer() needs the tensorboard package: "
                                  "pip install tensorboard") from exc
            self._writer = SummaryWriter(str(self.get_tensorboard_path()))
        return self._writer

    def get_enable_tensorboard_logging(self) -> bool:
        return self._tensorboard_logging

    def set_enable_tensorboard_logging(self, enable_tensorboard_logging: bool) -> None:
        """Kept for ``get_enable_tensorboard_logging``; the Trainer's metrics reach
        TensorBoard through ``dethpc tensorboard`` (from metrics.jsonl) either way."""
        self._tensorboard_logging = bool(enable_tensorboard_logging)

    def set_profiler(self, *args: Any, **kwargs: Any) -> None:
        """As Determined's: ``context.profiler`` becomes a ``torch.profiler.profile(*args,
        **kwargs)`` whose traces go to ``get_tensorboard_path()``; the Trainer enters it
        around each ``train_batch`` and steps it after."""
        handler = torch.profiler.tensorboard_trace_handler(str(self.get_tensorboard_path()))
        self.profiler = torch.profiler.profile(*args, on_trace_ready=handler, **kwargs)

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
            inner = model
            model = nn.parallel.DistributedDataParallel(inner, device_ids=ids, **ddp_options)
            self._time_forward_sync(model, inner)
        self.models.append(model)
        if self.experimental._auto_amp:
            return self.autocast_forward_pass(model)
        return model

    def _time_forward_sync(self, wrapper: nn.Module, inner: nn.Module) -> None:
        """Count the time between entering ``wrapper``'s forward and ``inner``'s (DDP's
        buffer broadcast, where a rank waits for rank 0 and so for the slowest) as sync."""
        entered: list[float] = []

        def before_wrapper(_module: nn.Module, _args: Any) -> None:
            entered[:] = [time.monotonic()]

        def before_inner(_module: nn.Module, _args: Any) -> None:
            if entered:
                self._sync_s += time.monotonic() - entered.pop()

        wrapper.register_forward_pre_hook(before_wrapper)
        inner.register_forward_pre_hook(before_inner)

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer,
                       backward_passes_per_step: int = 1,
                       fp16_compression: bool | None = None,
                       average_aggregated_gradients: bool | None = None
                       ) -> torch.optim.Optimizer:
        """Register the optimizer (its state is checkpointed). ``backward_passes_per_step``
        must be 1 (no gradient aggregation); ``fp16_compression`` (Horovod's) is refused;
        ``average_aggregated_gradients`` has nothing to average and is ignored."""
        if backward_passes_per_step != 1:
            raise DethpcError(f"wrap_optimizer(backward_passes_per_step="
                              f"{backward_passes_per_step}): dethpc's Trainer steps the "
                              "optimizer every batch; aggregate gradients over batches "
                              "yourself, or use a larger global_batch_size")
        if fp16_compression:
            raise DethpcError("wrap_optimizer(fp16_compression=True) compresses Horovod's "
                              "gradient exchange; dethpc's Trainer uses DistributedDataParallel"
                              ": register a DDP communication hook on the wrapped model")
        del average_aggregated_gradients
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(self, lr_scheduler: Any, step_mode: StepMode,
                          frequency: int = 1) -> Any:
        """The Trainer steps it every ``frequency`` batches / optimizer steps / epochs, or
        never (MANUAL_STEP); returns ``lr_scheduler``. As Determined's: ``step_mode`` is
        required (a ``StepMode`` member, ``TypeError`` otherwise); a
        ``ReduceLROnPlateau`` (its ``step`` needs a metric) takes ``MANUAL_STEP`` only, and
        a scheduler's ``optimizer`` must be one ``wrap_optimizer`` returned
        (``InvalidExperimentException``, before anything is wrapped). An ``LRScheduler``
        given here is wrapped again: the mode given here steps it."""
        if isinstance(lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) and \
                step_mode != StepMode.MANUAL_STEP:
            raise InvalidExperimentException(
                "wrap_lr_scheduler() of a torch.optim.lr_scheduler.ReduceLROnPlateau with "
                f"step_mode={step_mode}: its step() needs the metric, so the Trainer cannot "
                "step it; wrap it with StepMode.MANUAL_STEP and step it yourself, e.g. in a "
                "PyTorchCallback's on_validation_end(metrics) (as Determined requires)")
        optimizer = getattr(lr_scheduler, "optimizer", None)
        if optimizer is not None and optimizer not in self.optimizers:
            raise InvalidExperimentException(
                "wrap_lr_scheduler(): the scheduler's optimizer is not one wrap_optimizer() "
                "returned; build the scheduler on the optimizer context.wrap_optimizer() "
                "returns (as Determined requires)")
        self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode, frequency))
        return lr_scheduler

    def wrap_scaler(self, scaler: Any) -> Any:
        """Register a ``torch.amp.GradScaler`` (or ``torch.cuda.amp``'s) so that the
        Trainer checkpoints and restores its state.

        As in Determined outside its automatic AMP, wrapping changes no step: the trial
        scales its loss (``context.backward(scaler.scale(loss))``), unscales before
        clipping (in its ``clip_grads``), passes ``scaler=`` to ``step_optimizer`` and
        calls ``scaler.update()`` itself.

        As Determined's, it is called once, before ``wrap_model``."""
        if self._scaler is not None:
            raise DethpcError("wrap_scaler() was already called: wrap one scaler, once "
                              "(as Determined)")
        if self.models:
            raise DethpcError("wrap_scaler() after wrap_model(): call wrap_scaler first, as "
                              "Determined requires")
        self._scaler = scaler
        return scaler

    @property
    def scaler(self) -> Any:
        return self._scaler

    # ---------------------------------------------------------------- steps
    def backward(self, loss: torch.Tensor, gradient: torch.Tensor | None = None,
                 retain_graph: bool = False, create_graph: bool = False) -> None:
        """``loss.backward(...)``. Only under automatic AMP (``experimental.use_amp()``) is
        the loss scaled here by the context's scaler, as Determined; a scaler wrapped with
        ``wrap_scaler`` is the trial's to apply (``context.backward(scaler.scale(loss))``)."""
        if self._scaler is not None and self.experimental._auto_amp:
            loss = self._scaler.scale(loss)
        start = time.monotonic()
        loss.backward(gradient=gradient, retain_graph=retain_graph, create_graph=create_graph)
        self._sync_s += time.monotonic() - start

    def step_optimizer(self, optimizer: torch.optim.Optimizer,
                       clip_grads: Callable[[Iterable[nn.Parameter]], Any] | None = None,
                       auto_zero_grads: bool = True, scaler: Any = None) -> None:
        """As Determined's: ``clip_grads(params)`` (the optimizer's parameters, a list) if
        given, then ``scaler.step(optimizer)`` when ``scaler`` is passed, else
        ``optimizer.step()``, then zero the gradients.

        Outside automatic AMP nothing is unscaled or updated here, and a wrapped scaler
        not passed as ``scaler=`` is not used: unscaling before clipping and
        ``scaler.update()`` after the step are the trial's, as in Determined's documented
        AMP pattern. Under ``experimental.use_amp()`` the context's scaler unscales before
        ``clip_grads``, steps the optimizer, and the Trainer updates it after
        ``train_batch``."""
        params = [p for group in optimizer.param_groups for p in group.get("params", [])]
        auto = self._scaler is not None and self.experimental._auto_amp
        if clip_grads is not None:
            if auto:
                self._scaler.unscale_(optimizer)
            clip_grads(params)
        if scaler is None and auto:
            scaler = self._scaler
        if scaler is not None:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad(set_to_none=True)

    def autocast_forward_pass(self, to_wrap: nn.Module) -> nn.Module:
        """Run ``to_wrap``'s forward under autocast and hand float16 outputs back as
        float32 (so that the loss is computed in float32), as Determined's.

        As Determined's (``torch.cuda.amp.autocast``), this is CUDA autocast: on a CPU
        device it changes nothing (Determined's CUDA autocast disables itself there with a
        warning; dethpc logs once instead). Unlike Determined's, which returns a proxy
        object, the module itself is returned with a pair of forward hooks: the same
        object, its ``state_dict`` keys unchanged."""
        if self.device.type != "cuda":
            if not getattr(self, "_amp_cpu_logged", False):
                self._amp_cpu_logged = True
                log.warning("automatic mixed precision (use_amp/autocast_forward_pass) is "
                            "CUDA autocast, as Determined's: on %s it is off and the trial "
                            "trains in full precision", self.device)
            return to_wrap
        entered: list[Any] = []

        def enter(_module: nn.Module, _args: Any) -> None:
            ctx = torch.autocast("cuda")
            ctx.__enter__()
            entered.append(ctx)

        def leave(_module: nn.Module, _args: Any, output: Any) -> Any:
            if entered:
                entered.pop().__exit__(None, None, None)
            return _to_float32(output)

        to_wrap.register_forward_pre_hook(enter)
        to_wrap.register_forward_hook(leave, always_call=True)
        return to_wrap

    # apex is not served (a GPU-only NVIDIA extension Determined itself deprecates)
    _CTX = "determined.pytorch.PyTorchTrialContext"
    configure_apex_amp = refused_method(f"{_CTX}.configure_apex_amp")

    # --------------------------------------------------------------- reducers
    def wrap_reducer(self, reducer: Callable[[list[Any]], Any] | MetricReducer,
                     name: str | None = None, for_training: bool = True,
                     for_validation: bool = True) -> MetricReducer:
        """Register a custom metric reducer, as Determined's: a ``MetricReducer``, or a
        function of all the values (returned wrapped: call ``.update(value)`` on it in
        ``train_batch``/``evaluate_batch``). The Trainer resets it before each training
        workload and validation and adds its result to the metrics it reports, under
        ``name`` (or the keys of the dict it returns when ``name`` is None)."""
        return self._reducers.wrap(reducer, name, for_training, for_validation)

    def reset_reducers(self) -> None:
        """``reset()`` every wrapped reducer."""
        self._reducers.reset()

    def reduce_metrics(self, for_training: bool) -> dict[str, Any]:
        """The reducers' metrics (training or validation ones), combined across the
        ranks with one allgather: every rank must call it."""
        return self._reducers.reduce(for_training)

    @property
    def _wrapped_reducers(self) -> list[WrappedReducer]:
        """The wrapped reducers in the order they were wrapped (Determined's attribute of
        that name, what ``run_cross_slot_reduction`` takes)."""
        return list(self._reducers.entries)

    def run_cross_slot_reduction(self, reducables: list[WrappedReducer],
                                 gathered: list[Any]) -> dict[str, Any]:
        """Determined's last step of a reduction, without the allgather: ``gathered``
        holds one list per slot of each of ``reducables``' ``per_slot_reduce()`` results;
        returns their metrics (each reducer's ``name``, or its dict when it has none)."""
        return cross_slot_reduction(reducables, gathered)

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


class PyTorchExperimentalContext:
    """Determined's ``context.experimental``."""

    def __init__(self, parent: PyTorchTrialContext) -> None:
        self._parent = parent
        self.auto_to_device = True
        self._amp = False

    def disable_auto_to_device(self) -> None:
        """The Trainer then hands batches to the trial as the loader made them."""
        self.auto_to_device = False

    def disable_dataset_reproducibility_checks(self) -> None:
        """Nothing to disable: dethpc's Trainer rebuilds the loaders itself, seeded."""

    @property
    def _auto_amp(self) -> bool:
        return self._amp

    def use_amp(self) -> None:
        """Determined's automatic mixed precision: a ``GradScaler`` is wrapped, models
        wrapped afterwards run their forward under autocast, ``backward`` scales the loss,
        ``step_optimizer`` unscales before clipping and steps through the scaler, and the
        Trainer updates the scaler after each ``train_batch``. Call it before
        ``wrap_model`` and instead of ``wrap_scaler``.

        As Determined's this is CUDA AMP: on a CPU device the scaler and autocast are
        disabled and training is full precision (Determined's own ``use_amp`` gives the
        same numbers on CPU; ``tests/local/test_determined_oracle.py`` compares them)."""
        parent = self._parent
        cuda = parent.device.type == "cuda"
        parent.wrap_scaler(torch.amp.GradScaler("cuda", enabled=cuda))
        self._amp = True


class PyTorchTrial(ABC):
    """Subclass this; the ``Trainer`` drives it. Data loaders must be
    ``torch.utils.data.DataLoader`` over a map-style dataset: the Trainer rebuilds
    them with a seeded, sharded sampler so that resume reproduces the data order."""

    @abstractmethod
    def __init__(self, context: PyTorchTrialContext) -> None: ...

    @abstractmethod
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        """One optimizer step; ``batch_idx`` counts batches since the trial began."""

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        """Metrics of one validation batch; the Trainer averages them over batches.
        Define this or ``evaluate_full_dataset`` (exactly one, as Determined)."""
        raise NotImplementedError("define evaluate_batch() or evaluate_full_dataset()")

    @abstractmethod
    def build_training_data_loader(self) -> torch.utils.data.DataLoader:
        ...

    @abstractmethod
    def build_validation_data_loader(self) -> torch.utils.data.DataLoader:
        ...

    #: the context class the Trainer builds for this trial (Determined's harness reads it)
    trial_context_class: type[PyTorchTrialContext] = PyTorchTrialContext
    #: None: no controller class runs a trial here, ``det.pytorch.Trainer`` does
    trial_controller_class: type | None = None

    # Determined's optional methods: the Trainer refuses a trial that overrides one it
    # does not run (TRAINER_REFUSES), before training starts.
    def build_callbacks(self) -> dict[str, Any]:
        """``{name: PyTorchCallback}``: the Trainer calls their hooks, and saves each one's
        ``state_dict()`` under its name in every checkpoint."""
        return {}

    def evaluate_full_dataset(self, data_loader: torch.utils.data.DataLoader) -> dict[str, Any]:
        """Validation metrics from the whole validation loader, computed by the trial
        (instead of ``evaluate_batch``): as Determined's, called on the chief (rank 0)
        only, with the unsharded loader, and its metrics reported as they are."""
        raise NotImplementedError("define evaluate_batch() or evaluate_full_dataset()")

    def evaluation_reducer(self) -> Reducer | dict[str, Reducer]:
        """How validation metrics are reduced over batches (and ranks): the mean
        (``Reducer.AVG``) unless overridden, as Determined's."""
        return Reducer.AVG

    def get_batch_length(self, batch: Any) -> int:
        """Records in ``batch`` (Determined counts records with it; dethpc's Trainer
        counts batches and does not call it)."""
        first = batch[0] if isinstance(batch, list | tuple) and batch else batch
        return len(first) if hasattr(first, "__len__") else 1


#: Determined trial methods the Trainer does not run: overriding one is refused
TRAINER_REFUSES: tuple[str, ...] = ()


def _to_float32(output: Any) -> Any:
    """float16 tensors (nested in dicts, lists, tuples) as float32; the rest as is."""
    if isinstance(output, torch.Tensor):
        return output.float() if output.dtype == torch.float16 else output
    if isinstance(output, dict):
        return {k: _to_float32(v) for k, v in output.items()}
    if isinstance(output, list):
        return [_to_float32(v) for v in output]
    if isinstance(output, tuple):
        return tuple(_to_float32(v) for v in output)
    return output
