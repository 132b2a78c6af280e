"""The training loop: ``Trainer(trial, context).fit(...)``.

Owns: the loop over batches with training/validation reporting, checkpoints at
a period, at the end and on preemption, exact resume (model, optimizers, LR
schedulers, a wrapped gradient scaler, every rank's RNG state and the data position, so
a run preempted k times ends bit-identical to an uninterrupted one on CPU), test mode,
``context.set_stop_requested(True)`` (checkpoint, an early exit, return), Determined's
``PyTorchCallback`` hooks in Determined's order (``dethpc.pytorch._callback``), custom
metric reducers, ``evaluate_full_dataset``, the checkpoint policy after validations,
``load_data.json`` in each checkpoint (``load_trial_from_checkpoint_path``), Determined's
evaluation reducers (AVG, SUM, MAX, MIN), and the refusal, before training, of a trial
that asks for what the loop does not do.
Must not: parse the experiment config beyond the two period fields and the searcher's
metric and length (``searcher.time_metric``/``max_time``, for the warning), exit the
process (``dethpc.core.init`` does, with 80/81), or know how files are laid out
(``dethpc.core`` checkpoint/train contexts do).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dethpc.common.errors import DethpcError
from dethpc.common.jobenv import ENV_TEST_MODE
from dethpc.core import EarlyExitReason
from dethpc.core._refused import refuse
from dethpc.pytorch._callback import PyTorchCallback
from dethpc.pytorch._data import EpochLoaders
from dethpc.pytorch._state import capture_rng, preserved_rng, restore_rng
from dethpc.pytorch._trial import TRAINER_REFUSES, PyTorchTrial, PyTorchTrialContext, Reducer
from dethpc.pytorch._units import Batch, Epoch, TrainUnit, as_unit, from_config

log = logging.getLogger(__name__)

STATE_FILE = "state.pt"
#: /2: Determined's key names for what both keep (``models_state_dict``,
#: ``optimizers_state_dict``, ``lr_schedulers_state_dict``, ``scaler_state_dict``,
#: ``callbacks``): a callback's ``on_checkpoint_load_start`` / ``_save_start`` sees
#: Determined's keys. /1 (``models``, ``optimizers``, ``lr_schedulers``, ``scaler``) loads.
FORMAT = "dethpc.pytorch/2"
#: what a /1 state called the keys /2 names as Determined
_V1_KEYS = {"models": "models_state_dict", "optimizers": "optimizers_state_dict",
            "lr_schedulers": "lr_schedulers_state_dict", "scaler": "scaler_state_dict"}
#: the trial's class and hyperparameters, for ``load_trial_from_checkpoint_path``
LOAD_DATA_FILE = "load_data.json"


@dataclass
class _Progress:
    batches: int = 0
    last_validation: int = -1
    last_checkpoint: int = -1


@dataclass(frozen=True)
class _Plan:
    max_batches: int
    batches_per_epoch: int
    unit: str
    validate_at: frozenset[int]
    #: each a period (``Batch(n)``/``Epoch(n)``) or a schedule (``Batch([1, 5, 10])``)
    validation_period: TrainUnit | None
    checkpoint_period: TrainUnit | None
    reporting_period: TrainUnit
    test_mode: bool
    test_validation_batches: int | None

    def steps(self, batches: int) -> int:
        """``batches`` in the searcher's unit (what metrics.jsonl records)."""
        return batches if self.unit == "batches" else batches // self.batches_per_epoch

    def due(self, period: TrainUnit | None, batches: int) -> bool:
        """Does ``period`` (or schedule) fall after batch ``batches``?"""
        return period is not None and period.due(batches, self.batches_per_epoch)


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _to_float(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().float().mean().item() if value.numel() else float("nan")
    return value


def _mean_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-key mean of numeric values; non-numeric keys keep their last value."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    other: dict[str, Any] = {}
    for row in rows:
        for key, raw in row.items():
            value = _to_float(raw)
            if isinstance(value, int | float) and not isinstance(value, bool):
                sums[key] += float(value)
                counts[key] += 1
            else:
                other[key] = value
    return {**other, **{k: sums[k] / counts[k] for k in sums}}


def _reduce(reducer: Reducer, values: list[float]) -> float:
    """Determined's ``Reducer`` over values (NumPy's sum, as Determined's)."""
    import numpy as np

    if not values:
        return math.nan
    if reducer is Reducer.SUM:
        return float(np.sum(np.asarray(values, dtype=np.float64)))
    if reducer is Reducer.MAX:
        return float(max(values))
    if reducer is Reducer.MIN:
        return float(min(values))
    return float(np.average(np.asarray(values, dtype=np.float64)))


def _numbers(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A reducer's metrics with tensors as floats (as the Trainer's own)."""
    return {k: _to_float(v) for k, v in metrics.items()}


def upgrade_state(state: dict[str, Any]) -> dict[str, Any]:
    """A ``state.pt`` of any format this Trainer wrote, with the current key names."""
    if state.get("format") == "dethpc.pytorch/1":
        state = {_V1_KEYS.get(k, k): v for k, v in state.items()}
        if state.get("scaler_state_dict") is None:
            state.pop("scaler_state_dict", None)
        state.setdefault("callbacks", {})
    return state


def _load_state(path: Path, uuid: str, *, writer: str, map_location: Any) -> dict[str, Any]:
    """The ``STATE_FILE`` of checkpoint ``uuid``, restored at ``path``, loaded onto
    ``map_location``; ``DethpcError`` when the checkpoint has none (it was not written by
    ``writer``, the trainer named in the message). Both trainers' ``_restore`` read it
    here; each checks what is its own after (the Trainer upgrades an older format, the
    DeepSpeed one refuses another format)."""
    file = Path(path) / STATE_FILE
    if not file.is_file():
        raise DethpcError(f"checkpoint {uuid} has no {STATE_FILE}: it was not written by "
                          f"{writer}")
    # our own, checksum-verified file; it holds RNG states (not weights only)
    state: dict[str, Any] = torch.load(file, map_location=map_location, weights_only=False)
    return state


class Trainer:
    """Drives a ``PyTorchTrial`` with checkpoint/resume/preemption handled.

    A subclass drives another trial type through the same loop by overriding the
    ``_trial_base`` and the ``_train_items`` / ``_call_train_batch`` /
    ``_validation_items`` / ``_call_evaluate_batch`` / ``_batches_per_epoch`` /
    ``_data_shard`` seams and the checkpoint pair (``dethpc.pytorch._deepspeed``)."""

    #: the trial class whose methods count as "not overridden"
    _trial_base: type = PyTorchTrial

    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
        self.trial = trial
        self.context = context
        self.core = context.core
        self.dist = context.distributed
        self.progress = _Progress()
        self._pending: list[dict[str, Any]] = []
        self.callbacks: dict[str, PyTorchCallback] = {}
        self._checkpoint_policy = "best"
        self._last_uuid: str | None = None

    def configure_profiler(self, sync_timings: bool = True, enabled: bool = False,
                           begin_on_batch: int = 0, end_after_batch: int | None = None) -> None:
        """Determined's system-metrics profiler: logged, nothing is profiled."""
        if enabled:
            log.info("configure_profiler(enabled=True): dethpc collects no system metrics; "
                     "use sstat/seff or torch.profiler")

    def _refuse_unsupported(self) -> None:
        """Refuse, before anything trains, a trial that relies on what the loop does not do."""
        base = self._trial_base
        for name in TRAINER_REFUSES:
            if getattr(type(self.trial), name, None) is not getattr(base, name, None):
                refuse(f"determined.pytorch.PyTorchTrial.{name}")
        if self._full_dataset == self._overrides("evaluate_batch"):
            raise DethpcError("define exactly one of evaluate_batch() and "
                              "evaluate_full_dataset() in the trial (as Determined requires)")
        reducer = self.trial.evaluation_reducer()
        reducers = reducer.values() if isinstance(reducer, Mapping) else [reducer]
        if not all(isinstance(r, Reducer) for r in reducers):
            raise DethpcError("evaluation_reducer() must return a det.pytorch.Reducer or a "
                              "dict of them (as Determined requires)")

    def _overrides(self, name: str) -> bool:
        return getattr(type(self.trial), name) is not getattr(self._trial_base, name)

    @property
    def _full_dataset(self) -> bool:
        return self._overrides("evaluate_full_dataset")

    def _hooks(self, name: str, *args: Any, **kwargs: Any) -> None:
        for callback in self.callbacks.values():
            getattr(callback, name)(*args, **kwargs)

    def _on_epoch_start(self, epoch: int) -> None:
        for callback in self.callbacks.values():
            hook = callback.on_training_epoch_start
            if inspect.signature(hook).parameters:
                hook(epoch)
            else:  # Determined still calls the pre-0.17.8 form without epoch_idx
                log.warning("on_training_epoch_start() without epoch_idx is deprecated "
                            "(Determined 0.17.8); add the parameter")
                hook()  # type: ignore[call-arg]

    def _first_batch(self, uuid: str | None) -> int:
        """The batch a resumed run starts from, as the checkpoint's metadata says."""
        if uuid is None:
            return 0
        try:
            meta = self.core.checkpoint.get_metadata(uuid)
        except Exception:  # noqa: BLE001 - _restore reports an unusable checkpoint
            return 0
        return int(meta.get("batches_trained", meta.get("steps_completed", 0)) or 0)

    def _check_searcher_length(self, max_length: TrainUnit) -> None:
        """Warn, as Determined's ``fit`` does, when ``max_length`` is not the length the
        ASHA searcher ranks at (``searcher.time_metric`` and ``max_time``). What follows
        differs when it is longer: Determined trains on until the searcher's stop at the
        top rung (at the trial's first validation at or past ``max_time``) reaches it;
        dethpc trains to ``max_time`` (validating there) and completes
        (``docs/searchers.md``, "Deviations")."""
        searcher = self.core.job_info.experiment_config.get("searcher")
        if not isinstance(searcher, Mapping) or searcher.get("time_metric") is None:
            return
        metric, max_time = searcher.get("time_metric"), searcher.get("max_time")
        kind = {"batches": Batch, "epochs": Epoch}.get(str(metric))
        if kind is None:
            log.warning("searcher.time_metric %r is neither batches nor epochs: the trial "
                        "trains to fit(max_length=%s)", metric, max_length)
            return
        if isinstance(max_length, kind) and max_length.value == max_time:
            return
        wanted = kind(max_time) if isinstance(max_time, int) and max_time > 0 else max_time
        log.warning(
            "fit(max_length=%s) does not match searcher.time_metric and max_time of the "
            "experiment config (%s): the trial ends at the shorter of the two (a longer "
            "max_length stops where the searcher ranks its top rung; Determined would train "
            "on to its next validation there)", max_length, wanted)

    # ------------------------------------------------------------------ plan
    def _plan(self, max_length: TrainUnit | None, checkpoint_period: TrainUnit | None,
              validation_period: TrainUnit | None, reporting_period: TrainUnit,
              test_mode: bool, test_validation_batches: int, bpe: int) -> _Plan:
        target = self.core.searcher.target
        unit = target.unit if target else "batches"
        if unit == "records":
            raise DethpcError("the searcher target is in records; the PyTorch Trainer counts "
                              "batches or epochs: use max_length: {batches: N} or {epochs: N}")
        validate_at: set[int] = set()
        if target is not None:
            scale = 1 if unit == "batches" else bpe
            max_batches = target.length * scale
            validate_at = {v * scale for v in target.validate_at}
            if max_length is not None and target.fit_length_wins:
                # single, random, grid: as Determined 0.38, fit's max_length decides,
                # longer or shorter; the searcher's length (the legacy searcher.max_length)
                # is only the length of a fit without one, and no validation point
                if max_length.batches(bpe) != max_batches:
                    log.info("fit(max_length=%s) decides the trial's length, not "
                             "searcher.max_length (%d %s), as Determined's",
                             max_length, target.length, unit)
                max_batches, validate_at = max_length.batches(bpe), set()
            elif max_length is not None and max_length.batches(bpe) < max_batches:
                # ASHA: Determined 0.38 trains to the user's length and lets the searcher
                # stop it early: a trial shorter than its rung completes at its own length.
                # A longer one stops at the target (_check_searcher_length warns;
                # docs/searchers.md, "Deviations")
                log.info("fit(max_length=%s) is shorter than the searcher's target "
                         "(%d %s): the trial completes at its own length",
                         max_length, target.length, unit)
                max_batches = max_length.batches(bpe)
            validate_at = {b for b in validate_at if b <= max_batches}
        elif max_length is not None:
            max_batches = max_length.batches(bpe)
        elif test_mode:
            max_batches = 1
        else:
            raise DethpcError("no training length: this run has no searcher target "
                              "(target.json); pass Trainer.fit(max_length=Batch(n)) or Epoch(n)")
        cfg = self.core.job_info.experiment_config
        validation_period = validation_period or from_config(
            cfg.get("min_validation_period"), "min_validation_period")
        checkpoint_period = checkpoint_period or from_config(
            cfg.get("min_checkpoint_period"), "min_checkpoint_period")
        if test_mode:
            max_batches, validate_at = 1, {1}
        return _Plan(
            max_batches=max_batches, batches_per_epoch=bpe, unit=unit,
            validate_at=frozenset(validate_at | {max_batches}),
            validation_period=validation_period, checkpoint_period=checkpoint_period,
            reporting_period=reporting_period, test_mode=test_mode,
            test_validation_batches=test_validation_batches if test_mode else None)

    # ------------------------------------------------------------------- fit
    def fit(self, checkpoint_period: TrainUnit | int | None = None,
            validation_period: TrainUnit | int | None = None,
            max_length: TrainUnit | int | None = None,
            reporting_period: TrainUnit | int = Batch(10),
            checkpoint_policy: str = "best",
            latest_checkpoint: str | None = None,
            step_zero_validation: bool = False,
            test_mode: bool | None = None,
            profiling_enabled: bool = False, *,
            test_validation_batches: int = 2) -> None:
        """Train to ``max_length``, as Determined 0.38's ``fit``: under single, random
        and grid it decides (the searcher's ``target.json`` length, the legacy
        ``searcher.max_length``, is the length of a ``fit`` without one); under ASHA the
        target (the rung) caps it, and a shorter one ends the trial (a trial whose own
        length ends below its rung completes there); ``max_length`` alone off-cluster.

        The parameters are Determined 0.38's, in its order. ``checkpoint_policy``
        (``best``/``all``/``none``) and ``profiling_enabled`` are accepted and have no
        effect (checkpoints are written at ``checkpoint_period``, at the end and on
        preemption); ``step_zero_validation=True`` validates before the first batch.
        Returns normally when the length is reached, and also after checkpointing
        on preemption or a stop file; leaving ``dethpc.core.init()`` then exits
        the process with 80/81.
        """
        if checkpoint_policy not in ("best", "all", "none"):
            raise DethpcError(f"checkpoint_policy {checkpoint_policy!r} is not one of "
                              "best, all, none")
        if checkpoint_policy == "best" and not self.core.job_info.on_cluster:
            # as Determined's local training: no experiment to be best in
            checkpoint_policy = "all"
        self._checkpoint_policy = checkpoint_policy
        del profiling_enabled
        length = as_unit(max_length)
        if length is not None:
            # as Determined's fit(): a schedule is a period's, never a length (refused
            # before the trial starts up)
            length.require_length()
            if self.core.job_info.on_cluster:
                self._check_searcher_length(length)
        self._refuse_unsupported()
        callbacks = self.trial.build_callbacks()
        if not isinstance(callbacks, Mapping):
            raise DethpcError(f"build_callbacks() must return a dict of name -> "
                              f"PyTorchCallback, got {type(callbacks).__name__}")
        self.callbacks = dict(callbacks)
        if test_mode is None:
            test_mode = os.environ.get(ENV_TEST_MODE, "").lower() in ("1", "true", "yes")
        uuid = latest_checkpoint
        if uuid is None and self.core.job_info.on_cluster and not test_mode:
            uuid = self.core.job_info.latest_checkpoint
        with contextlib.ExitStack() as shutdown:
            first = self._first_batch(uuid)
            for callback in self.callbacks.values():
                callback.on_trial_startup(first, uuid)
                # run on the way out, however fit ends, in the reverse order
                shutdown.callback(callback.on_trial_shutdown)
            self._fit(uuid, max_length, checkpoint_period, validation_period,
                      reporting_period, step_zero_validation, test_mode,
                      test_validation_batches)

    def _fit(self, uuid: str | None, max_length: TrainUnit | int | None,
             checkpoint_period: TrainUnit | int | None,
             validation_period: TrainUnit | int | None, reporting_period: TrainUnit | int,
             step_zero_validation: bool, test_mode: bool,
             test_validation_batches: int) -> None:
        seed = self.context.get_trial_seed()
        rank, size = self._data_shard()
        self._train_data = EpochLoaders(self.trial.build_training_data_loader(), seed=seed,
                                        rank=rank, size=size, train=True,
                                        what="build_training_data_loader()")
        # evaluate_full_dataset runs on the chief alone, over the whole validation set
        full = self._full_dataset
        self._val_data = EpochLoaders(self.trial.build_validation_data_loader(), seed=seed,
                                      rank=0 if full else rank, size=1 if full else size,
                                      train=False, what="build_validation_data_loader()")
        plan = self._plan(as_unit(max_length), as_unit(checkpoint_period),
                          as_unit(validation_period), as_unit(reporting_period) or Batch(10),
                          test_mode, test_validation_batches, self._batches_per_epoch())
        if not self.context.models:
            raise DethpcError("the trial wrapped no model; call context.wrap_model(model) in "
                              "the trial's __init__")
        if uuid is not None:
            self._restore(uuid)
        self._hooks("on_training_start")
        self.context._batches_per_epoch = plan.batches_per_epoch
        self.context._batches = self.context._initial_batch = self.progress.batches
        log.info("training to %d batches (%d per epoch) from batch %d%s", plan.max_batches,
                 plan.batches_per_epoch, self.progress.batches,
                 f", resumed from checkpoint {uuid}" if uuid else "")
        if step_zero_validation and self.progress.batches == 0 and not test_mode:
            self._validate(plan)
        for model in self.context.models:
            model.train()
        if self._check_preempt(plan):
            return
        if self._train(plan):
            return
        self._finish(plan)

    def _train(self, plan: _Plan) -> bool:
        """Train until the length is reached (False) or preemption (True)."""
        times = self.core.step_times
        amp_scaler = self.context.scaler if self.context.experimental._auto_amp else None
        if not self._pending:
            self.context.reset_reducers()
        while self.progress.batches < plan.max_batches:
            epoch, offset = divmod(self.progress.batches, plan.batches_per_epoch)
            begun = time.monotonic()
            for batch in self._train_items(epoch, offset):
                sync_s = self.context._sync_s
                batch_idx = self.context._batches = self.progress.batches
                self.context._training = True
                if batch_idx % plan.batches_per_epoch == 0:
                    self._on_epoch_start(epoch)
                metrics = self._train_batch_profiled(batch, epoch, batch_idx)
                if amp_scaler is not None:  # automatic AMP: one update per batch
                    amp_scaler.update()
                if isinstance(metrics, torch.Tensor):  # as Determined: a bare loss
                    metrics = {"loss": metrics}
                if not isinstance(metrics, Mapping):
                    raise DethpcError(f"train_batch() must return a dict of metrics, got "
                                      f"{type(metrics).__name__}")
                # this rank's own work: its batch and train_batch, without DDP's waits
                busy = time.monotonic() - begun - (self.context._sync_s - sync_s)
                self._pending.append({k: _to_float(v) for k, v in metrics.items()})
                self.progress.batches += 1
                self._step_schedulers(plan)
                if self.progress.batches % plan.batches_per_epoch == 0:
                    self._hooks("on_training_epoch_end", epoch)
                stop = self._after_step(plan)
                if times is not None:
                    now = time.monotonic()
                    times.add(busy, now - begun)
                    begun = now
                if stop:
                    return True
                if self.progress.batches >= plan.max_batches:
                    return False
        return False

    def _train_batch_profiled(self, item: Any, epoch: int, batch_idx: int) -> Any:
        """``train_batch`` inside the torch profiler of ``context.set_profiler()`` (entered
        around each batch and stepped after it, as Determined's Trainer does)."""
        profiler = self.context.profiler
        if profiler is None:
            return self._call_train_batch(item, epoch, batch_idx)
        with profiler:
            metrics = self._call_train_batch(item, epoch, batch_idx)
            profiler.step()
        return metrics

    # ------------------------------------------- seams for another trial type
    def _data_shard(self) -> tuple[int, int]:
        """(rank, ranks) the data is sharded over."""
        return self.dist.rank, self.dist.size

    def _batches_per_epoch(self) -> int:
        return self._train_data.batches_per_epoch

    def _train_items(self, epoch: int, offset: int) -> Iterable[Any]:
        """One item per training batch of ``epoch`` from batch ``offset`` on."""
        return self._train_data.epoch(epoch, offset)

    def _call_train_batch(self, item: Any, epoch: int, batch_idx: int) -> Any:
        return self.trial.train_batch(self._device(item), epoch, batch_idx)

    def _validation_items(self) -> Iterable[Any]:
        return self._val_data.epoch(0)

    def _call_evaluate_batch(self, item: Any, batch_idx: int) -> Any:
        return self.trial.evaluate_batch(self._device(item), batch_idx)

    def _device(self, batch: Any) -> Any:
        return self.context.to_device(batch) if self.context.experimental.auto_to_device \
            else batch

    def _step_schedulers(self, plan: _Plan) -> None:
        for wrapped in self.context.lr_schedulers:
            if wrapped.due(self.progress.batches, plan.batches_per_epoch):
                wrapped.scheduler.step()

    def _after_step(self, plan: _Plan) -> bool:
        b = self.progress.batches
        inside = b < plan.max_batches
        # as Determined's Trainer, a period that falls on the last batch is kept in its
        # order (validation, then checkpoint) before the final validation and checkpoint
        # of _finish (a checkpoint period on the last batch checkpoints before validating)
        validate = (inside and b in plan.validate_at) or plan.due(plan.validation_period, b)
        checkpoint = plan.due(plan.checkpoint_period, b)
        # as Determined's Trainer: the batches since the last report are reported at every
        # boundary (reporting, validation or checkpoint period), not only at a reporting one
        boundary = plan.due(plan.reporting_period, b) or validate or checkpoint
        if boundary:
            self._report_training(plan)
        if validate:
            self._validate(plan)
        if checkpoint and self.progress.last_checkpoint != b:
            self._checkpoint(plan)
        return self._check_preempt(plan, boundary) if inside else False

    def _check_preempt(self, plan: _Plan, boundary: bool = True) -> bool:
        # every rank's own flag, as Determined's: trial code sets it on every rank; as
        # Determined's Trainer, a requested stop is honoured at the next boundary (a
        # reporting, validation or checkpoint period: "we finish the step"), preemption
        # after any batch
        requested = boundary and self.context.get_stop_requested()
        if not requested and not self.core.preempt.should_preempt():
            return False
        self._report_training(plan)
        if self.progress.batches > 0 and self.progress.last_checkpoint != self.progress.batches:
            self._checkpoint(plan)
        if requested:
            self.core.train.report_early_exit(EarlyExitReason.USER_REQUESTED_STOP)
            log.info("stopped at batch %d: the trial asked to stop (set_stop_requested)",
                     self.progress.batches)
            return True
        log.info("stopped at batch %d (%s)", self.progress.batches, self.core.preempt.reason)
        return True

    def _finish(self, plan: _Plan) -> None:
        self._report_training(plan)
        b = self.progress.batches
        if self.progress.last_validation != b:
            self._validate(plan)
        if self.progress.last_checkpoint != b:
            self._checkpoint(plan)
        uuid = self._last_uuid
        if plan.test_mode and uuid is not None:
            self._restore(uuid)  # proves the checkpoint loads back
            log.info("test mode: trained 1 batch, validated, checkpointed %s and restored it",
                     uuid)

    # ------------------------------------------------------------- metrics
    def _report_training(self, plan: _Plan) -> None:
        if not self._pending:
            return
        local = _mean_metrics(self._pending)
        batches, self._pending = self._pending, []
        if self.callbacks and self.dist.size > 1:
            # the batches' own metrics for on_training_workload_end: batch i averaged over
            # the ranks (as Determined's), and the mean of those
            per_rank = self.dist.allgather(batches)
            batches = [_mean_metrics(rows) for rows in zip(*per_rank, strict=False)]
            merged = _mean_metrics(batches)
        else:
            merged = _mean_metrics(self.dist.allgather(local)) if self.dist.size > 1 else local
        merged.update(_numbers(self.context.reduce_metrics(for_training=True)))
        self.core.train.report_training_metrics(plan.steps(self.progress.batches), merged)
        self._hooks("on_training_workload_end", avg_metrics=dict(merged),
                    batch_metrics=batches)
        self.context.reset_reducers()

    def _validate(self, plan: _Plan) -> dict[str, Any]:
        was_training = [m.training for m in self.context.models]
        for model in self.context.models:
            model.eval()
        self.context.reset_reducers()
        self._hooks("on_validation_start")
        with preserved_rng(), torch.no_grad():
            if self._full_dataset:
                metrics = self._evaluate_full_dataset()
            else:
                metrics = self._evaluate_batches(plan)
            metrics.update(_numbers(self.context.reduce_metrics(for_training=False)))
        for model, mode in zip(self.context.models, was_training, strict=True):
            model.train(mode)
        if self.dist.size > 1 and self._full_dataset and any(
                type(c).on_validation_end is not PyTorchCallback.on_validation_end
                for c in self.callbacks.values()):
            metrics = self.dist.broadcast(metrics)  # the chief's, for every rank's hook
        self._hooks("on_validation_end", metrics)
        self.context.reset_reducers()  # training's start afresh after it, as Determined's
        best_before = None
        if self._checkpoint_policy == "best" and self.dist.rank == 0:
            best_before = self.core.train.get_experiment_best_validation()
        self.core.train.report_validation_metrics(plan.steps(self.progress.batches), metrics)
        self.progress.last_validation = self.progress.batches
        if self.dist.broadcast(self._checkpoint_after(metrics, best_before)):
            self._checkpoint(plan)
        return metrics

    def _checkpoint_after(self, metrics: Mapping[str, Any], best_before: float | None) -> bool:
        """Determined's ``checkpoint_policy`` after a validation (chief's answer): ``all``
        checkpoints, ``best`` when the searcher's metric beats every earlier validation of
        the experiment, ``none`` never."""
        if self.dist.rank != 0 or self.progress.last_checkpoint == self.progress.batches:
            return False
        if self._checkpoint_policy != "best":
            return self._checkpoint_policy == "all"
        searcher = self.core.job_info.experiment_config.get("searcher") or {}
        value = metrics.get(searcher.get("metric", "")) if isinstance(searcher, Mapping) \
            else None
        if best_before is None or not isinstance(value, int | float):
            return True
        smaller = searcher.get("smaller_is_better", True) is not False
        return bool(value < best_before if smaller else value > best_before)

    def _evaluate_full_dataset(self) -> dict[str, Any]:
        """The chief's ``evaluate_full_dataset`` over the whole validation loader; the
        other ranks report nothing of their own (as Determined's)."""
        if self.dist.rank != 0:
            return {}
        metrics = self.trial.evaluate_full_dataset(data_loader=self._val_data.epoch(0))
        if not isinstance(metrics, Mapping):
            raise DethpcError(f"evaluate_full_dataset() must return a dict of metrics, got "
                              f"{type(metrics).__name__}")
        return {k: _to_float(v) for k, v in metrics.items()}

    def _evaluate_batches(self, plan: _Plan) -> dict[str, Any]:
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        values: dict[str, list[float]] = defaultdict(list)
        outputs: list[Any] = []
        self._hooks("on_validation_epoch_start")
        for idx, batch in enumerate(self._validation_items()):
            if plan.test_validation_batches is not None and idx >= plan.test_validation_batches:
                break
            row = self._call_evaluate_batch(batch, idx)
            if self.callbacks:
                outputs.append(row)
            for key, raw in row.items():
                value = _to_float(raw)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    sums[key] += float(value)
                    counts[key] += 1
                    values[key].append(float(value))
        self._hooks("on_validation_epoch_end", outputs)
        # Determined's other reducers: this rank's batches reduced, then the ranks' results
        reducers = self._evaluation_reducers(list(sums))
        mine = {k: _reduce(r, values[k]) for k, r in reducers.items() if r is not Reducer.AVG}
        parts = self.dist.allgather((dict(sums), dict(counts), mine)) if self.dist.size > 1 \
            else [(dict(sums), dict(counts), mine)]
        total_s: dict[str, float] = defaultdict(float)
        total_c: dict[str, int] = defaultdict(int)
        for part_s, part_c, _ in parts:
            for key in part_s:
                total_s[key] += part_s[key]
                total_c[key] += part_c[key]
        metrics = {k: total_s[k] / total_c[k] if total_c[k] else math.nan for k in total_s}
        for key in mine:
            metrics[key] = _reduce(reducers[key], [p[2][key] for p in parts if key in p[2]])
        return metrics

    def _evaluation_reducers(self, keys: list[str]) -> dict[str, Reducer]:
        """``evaluation_reducer()`` per metric, as Determined's: one for all, or a dict
        naming every metric."""
        reducer = self.trial.evaluation_reducer()
        if not isinstance(reducer, Mapping):
            return dict.fromkeys(keys, reducer)
        if set(reducer) != set(keys):
            raise DethpcError(f"evaluation_reducer() returned reducers for {sorted(reducer)}, "
                              f"evaluate_batch() returned {sorted(keys)}: give one reducer, "
                              "or one for every validation metric (as Determined requires)")
        return dict(reducer)

    # ---------------------------------------------------------- checkpoints
    def _checkpoint(self, plan: _Plan) -> str:
        self.progress.last_checkpoint = self.progress.batches
        rngs = self.dist.allgather(capture_rng())
        uuid: str | None = None
        if self.dist.rank == 0:
            state: dict[str, Any] = {
                "format": FORMAT,
                "models_state_dict": [_unwrap(m).state_dict() for m in self.context.models],
                "optimizers_state_dict": [o.state_dict() for o in self.context.optimizers],
                "lr_schedulers_state_dict": [w.scheduler.state_dict()
                                             for w in self.context.lr_schedulers],
                "callbacks": {name: cb.state_dict() for name, cb in self.callbacks.items()},
                "progress": asdict(self.progress),
                "rng": rngs,
            }
            if self.context.scaler is not None:
                state["scaler_state_dict"] = self.context.scaler.state_dict()
            self._hooks("on_checkpoint_save_start", state)
            meta = {"steps_completed": plan.steps(self.progress.batches),
                    "batches_trained": self.progress.batches, "format": FORMAT,
                    "framework": f"torch-{torch.__version__}", "world_size": self.dist.size}
            with self.core.checkpoint.store_path(meta) as (path, new_uuid):
                torch.save(state, Path(path) / STATE_FILE)
                self._write_load_data(Path(path))
                for callback in self.callbacks.values():
                    callback.on_checkpoint_end(str(path))
                    callback.on_checkpoint_write_end(str(path))
            uuid = new_uuid
        uuid = self.dist.broadcast(uuid)
        assert uuid is not None  # noqa: S101 - rank 0 always sets it
        self._last_uuid = uuid
        self._hooks("on_checkpoint_upload_end", uuid=uuid)
        return uuid

    def _write_load_data(self, path: Path) -> None:
        """What ``load_trial_from_checkpoint_path`` needs: the trial's class (imported by
        ``module:qualname``, from the experiment's model directory where there is one),
        its hyperparameters and the experiment config."""
        cls = type(self.trial)
        module = cls.__module__
        if module == "__main__":  # the entrypoint script: its file name is its module
            main = getattr(__import__("__main__"), "__file__", None)
            module = Path(main).stem if main else module
        data = {"trial_type": self._trial_base.__name__,
                "trial_cls_spec": f"{module}:{cls.__qualname__}",
                "hparams": self.context.get_hparams(),
                "experiment_config": self.context.get_experiment_config(),
                "model_dir": os.getcwd(), "is_trainer": True, "format": FORMAT}
        (path / LOAD_DATA_FILE).write_text(json.dumps(data, indent=1, default=str) + "\n")

    def _restore(self, uuid: str) -> None:
        with self.core.checkpoint.restore_path(uuid) as path:
            state = upgrade_state(_load_state(path, uuid, writer="dethpc.pytorch.Trainer",
                                              map_location=self.context.device))
        self._hooks("on_checkpoint_load_start", state)
        self._apply(state, uuid)
        self._restore_callbacks(state, uuid)

    def _restore_callbacks(self, state: Mapping[str, Any], uuid: str) -> None:
        """Each callback's saved state handed back (``load_state_dict``); one that
        implements it but has none saved starts from scratch, with a warning."""
        saved = state.get("callbacks") or {}
        for name, callback in self.callbacks.items():
            if name in saved:
                callback.load_state_dict(saved[name])
            elif type(callback).load_state_dict is not PyTorchCallback.load_state_dict:
                log.warning("callback %r implements load_state_dict() but checkpoint %s holds "
                            "no state under that name: it starts from scratch", name, uuid)

    def _apply(self, state: dict[str, Any], uuid: str) -> None:
        for what, ours in (("models", self.context.models),
                           ("optimizers", self.context.optimizers),
                           ("lr_schedulers", self.context.lr_schedulers)):
            saved = state.get(f"{what}_state_dict", [])
            if len(saved) != len(ours):
                raise DethpcError(f"checkpoint {uuid} has {len(saved)} {what}, "
                                  f"the trial wrapped {len(ours)}; it belongs to another model")
        for model, sd in zip(self.context.models, state["models_state_dict"], strict=True):
            _unwrap(model).load_state_dict(sd)
        for opt, sd in zip(self.context.optimizers, state["optimizers_state_dict"], strict=True):
            opt.load_state_dict(sd)
        for wrapped, sd in zip(self.context.lr_schedulers, state["lr_schedulers_state_dict"],
                               strict=True):
            wrapped.scheduler.load_state_dict(sd)
        if self.context.scaler is not None and state.get("scaler_state_dict") is not None:
            self.context.scaler.load_state_dict(state["scaler_state_dict"])
        self.progress = _Progress(**state["progress"])
        rngs = state.get("rng") or []
        if len(rngs) == self.dist.size:
            restore_rng(rngs[self.dist.rank])
        else:
            log.warning("checkpoint %s was written by %d rank(s), this run has %d: RNG states "
                        "are not restored, the run is not bit-reproducible from here", uuid,
                        len(rngs), self.dist.size)
