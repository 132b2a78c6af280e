"""The training loop: ``Trainer(trial, context).fit(...)``.

Owns: the loop over batches with training/validation reporting, checkpoints at
a period, at the end and on preemption, exact resume (model, optimizers, LR
schedulers, a wrapped gradient scaler, every rank's RNG state and the data position, so
a run preempted k times ends bit-identical to an uninterrupted one on CPU), test mode,
``context.set_stop_requested(True)`` (checkpoint, an early exit, return), and the refusal,
before training, of a trial that asks for what the loop does not do (Determined's
callbacks, whole-dataset validation, reducers other than the mean).
Must not: parse the experiment config beyond the two period fields, exit the
process (``dethpc.core.init`` does, with 80/81), or know how files are laid out
(``dethpc.core`` checkpoint/train contexts do).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dethpc.common.errors import DethpcError
from dethpc.common.jobenv import ENV_TEST_MODE
from dethpc.core import EarlyExitReason
from dethpc.core._refused import refuse
from dethpc.pytorch._data import EpochLoaders
from dethpc.pytorch._state import capture_rng, preserved_rng, restore_rng
from dethpc.pytorch._trial import TRAINER_REFUSES, PyTorchTrial, PyTorchTrialContext, Reducer
from dethpc.pytorch._units import Batch, TrainUnit, as_unit, from_config

log = logging.getLogger(__name__)

STATE_FILE = "state.pt"
FORMAT = "dethpc.pytorch/1"


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
    validation_period: int | None
    checkpoint_period: int | None
    reporting_period: int
    test_mode: bool
    test_validation_batches: int | None

    def steps(self, batches: int) -> int:
        """``batches`` in the searcher's unit (what metrics.jsonl records)."""
        return batches if self.unit == "batches" else batches // self.batches_per_epoch


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


class Trainer:
    """Drives a ``PyTorchTrial`` with checkpoint/resume/preemption handled."""

    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
        self.trial = trial
        self.context = context
        self.core = context.core
        self.dist = context.distributed
        self.progress = _Progress()
        self._pending: list[dict[str, Any]] = []

    def configure_profiler(self, sync_timings: bool = True, enabled: bool = False,
                           begin_on_batch: int = 0, end_after_batch: int | None = None) -> None:
        """Determined's system-metrics profiler: logged, nothing is profiled."""
        if enabled:
            log.info("configure_profiler(enabled=True): dethpc collects no system metrics; "
                     "use sstat/seff or torch.profiler")

    def _refuse_unsupported(self) -> None:
        """Refuse, before anything trains, a trial that relies on what the loop does not do."""
        base = PyTorchTrial
        for name in TRAINER_REFUSES:
            if getattr(type(self.trial), name) is not getattr(base, name):
                refuse(f"determined.pytorch.PyTorchTrial.{name}")
        if self.trial.build_callbacks():
            refuse("determined.pytorch.PyTorchCallback")
        reducer = self.trial.evaluation_reducer()
        reducers = reducer.values() if isinstance(reducer, Mapping) else [reducer]
        if any(r is not Reducer.AVG for r in reducers):
            refuse("determined.pytorch.PyTorchTrial.evaluation_reducer")

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
            if max_length is not None and max_length.batches(bpe) != max_batches:
                log.warning("fit(max_length=%s) ignored: the searcher's target.json asks "
                            "for %d %s", max_length, target.length, unit)
        elif max_length is not None:
            max_batches = max_length.batches(bpe)
        elif test_mode:
            max_batches = 1
        else:
            raise DethpcError("no training length: this run has no searcher target "
                              "(target.json); pass Trainer.fit(max_length=Batch(n)) or Epoch(n)")
        cfg = self.core.info.experiment_config
        validation_period = validation_period or from_config(
            cfg.get("min_validation_period"), "min_validation_period")
        checkpoint_period = checkpoint_period or from_config(
            cfg.get("min_checkpoint_period"), "min_checkpoint_period")
        if test_mode:
            max_batches, validate_at = 1, {1}
        return _Plan(
            max_batches=max_batches, batches_per_epoch=bpe, unit=unit,
            validate_at=frozenset(validate_at | {max_batches}),
            validation_period=validation_period.batches(bpe) if validation_period else None,
            checkpoint_period=checkpoint_period.batches(bpe) if checkpoint_period else None,
            reporting_period=reporting_period.batches(bpe), test_mode=test_mode,
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
        """Train to the searcher's target (or ``max_length`` off-cluster).

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
        del profiling_enabled
        self._refuse_unsupported()
        if test_mode is None:
            test_mode = os.environ.get(ENV_TEST_MODE, "").lower() in ("1", "true", "yes")
        seed = self.context.get_trial_seed()
        rank, size = self.dist.rank, self.dist.size
        self._train_data = EpochLoaders(self.trial.build_training_data_loader(), seed=seed,
                                        rank=rank, size=size, train=True,
                                        what="build_training_data_loader()")
        self._val_data = EpochLoaders(self.trial.build_validation_data_loader(), seed=seed,
                                      rank=rank, size=size, train=False,
                                      what="build_validation_data_loader()")
        plan = self._plan(as_unit(max_length), as_unit(checkpoint_period),
                          as_unit(validation_period), as_unit(reporting_period) or Batch(10),
                          test_mode, test_validation_batches, self._train_data.batches_per_epoch)
        if not self.context.models:
            raise DethpcError("the trial wrapped no model; call context.wrap_model(model) in "
                              "the trial's __init__")
        uuid = latest_checkpoint
        if uuid is None and self.core.info.on_cluster and not test_mode:
            uuid = self.core.info.latest_checkpoint
        if uuid is not None:
            self._restore(uuid)
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
        while self.progress.batches < plan.max_batches:
            epoch, offset = divmod(self.progress.batches, plan.batches_per_epoch)
            begun = time.monotonic()
            for batch in self._train_data.epoch(epoch, offset):
                sync_s = self.context._sync_s
                batch_idx = self.context._batches = self.progress.batches
                metrics = self.trial.train_batch(self._device(batch), epoch, batch_idx)
                if not isinstance(metrics, Mapping):
                    raise DethpcError(f"train_batch() must return a dict of metrics, got "
                                      f"{type(metrics).__name__}")
                # this rank's own work: its batch and train_batch, without DDP's waits
                busy = time.monotonic() - begun - (self.context._sync_s - sync_s)
                self._pending.append({k: _to_float(v) for k, v in metrics.items()})
                self.progress.batches += 1
                self._step_schedulers(plan)
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
        validate = inside and (b in plan.validate_at or bool(
            plan.validation_period and b % plan.validation_period == 0))
        checkpoint = inside and bool(plan.checkpoint_period and b % plan.checkpoint_period == 0)
        # as Determined's Trainer: the batches since the last report are reported at every
        # boundary (reporting, validation or checkpoint period), not only at a reporting one
        if b % plan.reporting_period == 0 or validate or checkpoint:
            self._report_training(plan)
        if inside:
            if validate:
                self._validate(plan)
            if checkpoint:
                self._checkpoint(plan)
            return self._check_preempt(plan)
        return False

    def _check_preempt(self, plan: _Plan) -> bool:
        # every rank's own flag, as Determined's: trial code sets it on every rank
        requested = self.context.get_stop_requested()
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
            uuid = self._checkpoint(plan)
        else:
            uuid = None
        if plan.test_mode and uuid is not None:
            self._restore(uuid)  # proves the checkpoint loads back
            log.info("test mode: trained 1 batch, validated, checkpointed %s and restored it",
                     uuid)

    # ------------------------------------------------------------- metrics
    def _report_training(self, plan: _Plan) -> None:
        if not self._pending:
            return
        local = _mean_metrics(self._pending)
        self._pending = []
        merged = _mean_metrics(self.dist.allgather(local)) if self.dist.size > 1 else local
        self.core.train.report_training_metrics(plan.steps(self.progress.batches), merged)

    def _validate(self, plan: _Plan) -> dict[str, Any]:
        was_training = [m.training for m in self.context.models]
        for model in self.context.models:
            model.eval()
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        with preserved_rng(), torch.no_grad():
            for idx, batch in enumerate(self._val_data.epoch(0)):
                if plan.test_validation_batches is not None and idx >= plan.test_validation_batches:
                    break
                row = self.trial.evaluate_batch(self._device(batch), idx)
                for key, raw in row.items():
                    value = _to_float(raw)
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        sums[key] += float(value)
                        counts[key] += 1
        for model, mode in zip(self.context.models, was_training, strict=True):
            model.train(mode)
        parts = self.dist.allgather((dict(sums), dict(counts))) if self.dist.size > 1 \
            else [(dict(sums), dict(counts))]
        total_s: dict[str, float] = defaultdict(float)
        total_c: dict[str, int] = defaultdict(int)
        for part_s, part_c in parts:
            for key in part_s:
                total_s[key] += part_s[key]
                total_c[key] += part_c[key]
        metrics = {k: total_s[k] / total_c[k] if total_c[k] else math.nan for k in total_s}
        self.core.train.report_validation_metrics(plan.steps(self.progress.batches), metrics)
        self.progress.last_validation = self.progress.batches
        return metrics

    # ---------------------------------------------------------- checkpoints
    def _checkpoint(self, plan: _Plan) -> str:
        self.progress.last_checkpoint = self.progress.batches
        rngs = self.dist.allgather(capture_rng())
        uuid: str | None = None
        if self.dist.rank == 0:
            state = {
                "format": FORMAT,
                "models": [_unwrap(m).state_dict() for m in self.context.models],
                "optimizers": [o.state_dict() for o in self.context.optimizers],
                "lr_schedulers": [w.scheduler.state_dict() for w in self.context.lr_schedulers],
                "progress": asdict(self.progress),
                "scaler": (None if self.context.scaler is None
                           else self.context.scaler.state_dict()),
                "rng": rngs,
            }
            meta = {"steps_completed": plan.steps(self.progress.batches),
                    "batches_trained": self.progress.batches, "format": FORMAT,
                    "framework": f"torch-{torch.__version__}", "world_size": self.dist.size}
            with self.core.checkpoint.store_path(meta) as (path, new_uuid):
                torch.save(state, Path(path) / STATE_FILE)
            uuid = new_uuid
        uuid = self.dist.broadcast(uuid)
        assert uuid is not None  # noqa: S101 - rank 0 always sets it
        return uuid

    def _restore(self, uuid: str) -> None:
        with self.core.checkpoint.restore_path(uuid) as path:
            file = Path(path) / STATE_FILE
            if not file.is_file():
                raise DethpcError(f"checkpoint {uuid} has no {STATE_FILE}: it was not written "
                                  "by dethpc.pytorch.Trainer")
            # Our own, checksum-verified file; it holds RNG states (not weights only).
            state = torch.load(file, map_location=self.context.device, weights_only=False)
        self._apply(state, uuid)

    def _apply(self, state: dict[str, Any], uuid: str) -> None:
        for what, ours in (("models", self.context.models),
                           ("optimizers", self.context.optimizers),
                           ("lr_schedulers", self.context.lr_schedulers)):
            if len(state.get(what, [])) != len(ours):
                raise DethpcError(f"checkpoint {uuid} has {len(state.get(what, []))} {what}, "
                                  f"the trial wrapped {len(ours)}; it belongs to another model")
        for model, sd in zip(self.context.models, state["models"], strict=True):
            _unwrap(model).load_state_dict(sd)
        for opt, sd in zip(self.context.optimizers, state["optimizers"], strict=True):
            opt.load_state_dict(sd)
        for wrapped, sd in zip(self.context.lr_schedulers, state["lr_schedulers"], strict=True):
            wrapped.scheduler.load_state_dict(sd)
        if self.context.scaler is not None and state.get("scaler") is not None:
            self.context.scaler.load_state_dict(state["scaler"])
        self.progress = _Progress(**state["progress"])
        rngs = state.get("rng") or []
        if len(rngs) == self.dist.size:
            restore_rng(rngs[self.dist.rank])
        else:
            log.warning("checkpoint %s was written by %d rank(s), this run has %d: RNG states "
                        "are not restored, the run is not bit-reproducible from here", uuid,
                        len(rngs), self.dist.size)
