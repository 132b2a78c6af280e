"""Determined's ``det.pytorch`` names the Trainer serves, or refuses before training:
the position the context shows, ``set_stop_requested``, LR scheduler step modes and
frequency, ``det.pytorch.DataLoader``, callbacks, whole-dataset validation, reducers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import dethpc as det  # noqa: E402
import dethpc.core as core  # noqa: E402
from dethpc.common.errors import DethpcError, UnsupportedError  # noqa: E402
from dethpc.pytorch._state import preserved_rng  # noqa: E402
from dethpc.pytorch._trial import StepMode  # noqa: E402


class Tiny(det.pytorch.PyTorchTrial):
    """Eight records, batch 2: four batches an epoch."""

    def __init__(self, context: Any, loader: type = det.pytorch.DataLoader) -> None:
        self.context = context
        self.loader = loader
        self.model = context.wrap_model(torch.nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))
        self.seen: list[tuple[int, int, bool, bool]] = []

    def _data(self) -> Any:
        return self.loader(torch.utils.data.TensorDataset(torch.ones(8, 1)), batch_size=2)

    def build_training_data_loader(self) -> Any:
        return self._data()

    def build_validation_data_loader(self) -> Any:
        return self._data()

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        ctx = self.context
        self.seen.append((ctx.current_train_batch(), ctx.current_train_epoch(),
                          ctx.is_epoch_start(), ctx.is_epoch_end()))
        loss = self.model(batch[0]).pow(2).mean()
        ctx.backward(loss)
        ctx.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        return {"val": self.model(batch[0]).mean()}


def _unit(value: Any) -> Any:
    return det.pytorch.Batch(value) if isinstance(value, int) else value


def _fit(tmp_path: Path, trial_cls: type = Tiny, batches: Any = 4,
         setup: Any = None, reporting: Any = 1,
         **periods: Any) -> tuple[Any, list[dict[str, Any]]]:
    trial_dir = tmp_path / "exp" / "trials" / "1"
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "hparams.json").write_text("{}")
    # no daemon reads the metrics: a rung's validation waits for no verdict
    env = {"DETHPC_TRIAL_DIR": str(trial_dir), "DETHPC_TRIAL_ID": "1",
           "DETHPC_EXPERIMENT_ID": "1", "DETHPC_VERDICT_WAIT_S": "0"}
    with preserved_rng(), core.init(env=env, exit_on_preempt=False) as ctx:
        context = det.pytorch.PyTorchTrialContext(ctx)
        trial = trial_cls(context)
        if setup is not None:
            setup(trial)
        det.pytorch.Trainer(trial, context).fit(max_length=_unit(batches),
                                                reporting_period=_unit(reporting), **periods)
    lines = (trial_dir / "metrics.jsonl").read_text().splitlines()
    return trial, [json.loads(line) for line in lines]


def test_the_context_shows_where_the_trainer_is(tmp_path: Path) -> None:
    trial, _ = _fit(tmp_path, batches=5)
    assert trial.seen == [(0, 0, True, False), (1, 0, False, False), (2, 0, False, False),
                          (3, 0, False, True), (4, 1, True, False)]
    assert trial.context.get_initial_batch() == 0
    assert trial.context.get_trial_id() == 1 and trial.context.get_experiment_id() == 1


def test_set_stop_requested_checkpoints_and_records_an_early_exit(tmp_path: Path) -> None:
    class Stopper(Tiny):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            if batch_idx == 1:
                self.context.set_stop_requested(True)
            return super().train_batch(batch, epoch_idx, batch_idx)

    _, records = _fit(tmp_path, Stopper, batches=4)
    kinds = [r["kind"] for r in records]
    assert kinds.index("checkpoint") < kinds.index("early_exit")
    assert [r["steps"] for r in records if r["kind"] == "checkpoint"] == [2]
    assert [r["reason"] for r in records if r["kind"] == "early_exit"] == [
        "user_requested_stop"]


def test_a_requested_stop_waits_for_the_next_boundary(tmp_path: Path) -> None:
    """As Determined's Trainer ("we finish the step, checkpoint, then exit"): asked in the
    first batch, with reports every 3 batches, the Trainer stops after batch 3."""
    class Stopper(Tiny):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            if batch_idx == 0:
                self.context.set_stop_requested(True)
            return super().train_batch(batch, epoch_idx, batch_idx)

    trial, records = _fit(tmp_path, Stopper, batches=8, reporting=3)
    assert len(trial.seen) == 3
    assert [r["steps"] for r in records if r["kind"] == "checkpoint"] == [3]
    assert [r["reason"] for r in records if r["kind"] == "early_exit"] == [
        "user_requested_stop"]


def test_the_position_is_refused_before_training(tmp_path: Path) -> None:
    """As Determined's: no position before the Trainer trains a batch."""
    with core.init(env={}, exit_on_preempt=False) as ctx:
        context = det.pytorch.PyTorchTrialContext(ctx)
        for getter in (context.current_train_batch, context.current_train_epoch,
                       context.is_epoch_start, context.is_epoch_end):
            with pytest.raises(DethpcError, match="training hasn't started"):
                getter()


def test_set_profiler_runs_the_torch_profiler_around_each_batch(tmp_path: Path) -> None:
    """``set_profiler`` as Determined's: ``context.profiler`` is a torch profiler the
    Trainer enters around each ``train_batch`` and steps after it."""
    def setup(trial: Tiny) -> None:
        trial.context.set_profiler(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=100, warmup=1, active=1))

    trial, _ = _fit(tmp_path, setup=setup, batches=4)
    assert isinstance(trial.context.profiler, torch.profiler.profile)
    assert trial.context.profiler.step_num == 4


def test_lr_schedulers_are_determineds_wrappers(tmp_path: Path) -> None:
    """``context.lr_schedulers`` holds ``LRScheduler`` objects (``get_last_lr`` and the
    rest), and an ``LRScheduler`` takes a ``StepMode`` member only, as Determined's."""
    def setup(trial: Tiny) -> None:
        trial.sched = trial.context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(trial.opt, 1, gamma=0.5),
            StepMode.STEP_EVERY_BATCH, frequency=2)

    trial, _ = _fit(tmp_path, setup=setup, batches=4)
    (wrapped,) = trial.context.lr_schedulers
    assert isinstance(wrapped, det.pytorch.LRScheduler)
    assert wrapped.get_last_lr() == [0.1 * 0.5 ** 2] and wrapped.frequency == 2
    with pytest.raises(TypeError, match="StepMode"):
        det.pytorch.LRScheduler(trial.sched, 2)  # type: ignore[arg-type]


@pytest.mark.parametrize(("mode", "frequency", "steps"), [
    (StepMode.STEP_EVERY_BATCH, 1, 8), (StepMode.STEP_EVERY_BATCH, 3, 2),
    (StepMode.STEP_EVERY_OPTIMIZER_STEP, 2, 4), (StepMode.STEP_EVERY_EPOCH, 1, 2),
    (StepMode.STEP_EVERY_EPOCH, 2, 1), (StepMode.MANUAL_STEP, 1, 0),
])
def test_lr_scheduler_step_modes(tmp_path: Path, mode: StepMode, frequency: int,
                                 steps: int) -> None:
    def setup(trial: Tiny) -> None:
        sched = torch.optim.lr_scheduler.StepLR(trial.opt, step_size=1, gamma=0.5)
        trial.context.wrap_lr_scheduler(sched, step_mode=mode, frequency=frequency)
        trial.sched = sched

    trial, _ = _fit(tmp_path, setup=setup, batches=8)
    assert trial.sched.last_epoch == steps


def test_a_wrapped_lr_scheduler_is_stepped_in_the_mode_wrap_lr_scheduler_got(
        tmp_path: Path) -> None:
    """An ``LRScheduler`` given to ``wrap_lr_scheduler`` is wrapped again, as Determined's:
    the mode and frequency of the call step it, not the ones it carries."""
    def setup(trial: Tiny) -> None:
        trial.sched = torch.optim.lr_scheduler.StepLR(trial.opt, step_size=1, gamma=0.5)
        inner = det.pytorch.LRScheduler(trial.sched, StepMode.MANUAL_STEP)
        trial.context.wrap_lr_scheduler(inner, StepMode.STEP_EVERY_BATCH, frequency=2)

    trial, _ = _fit(tmp_path, setup=setup, batches=8)
    assert trial.sched.last_epoch == 4


def test_wrap_lr_scheduler_checks_what_determined_checks() -> None:
    """``step_mode`` is required; a ``ReduceLROnPlateau`` takes ``MANUAL_STEP`` only; the
    scheduler's optimizer must be a wrapped one; nothing is held after a refusal."""
    from dethpc.common.errors import InvalidExperimentException

    with preserved_rng(), core.init(env={}, exit_on_preempt=False) as ctx:
        context = det.pytorch.PyTorchTrialContext(ctx)
        model = context.wrap_model(torch.nn.Linear(1, 1))
        opt = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
        other = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau
        with pytest.raises(TypeError):
            context.wrap_lr_scheduler(torch.optim.lr_scheduler.StepLR(opt, 1))  # type: ignore[call-arg]
        with pytest.raises(InvalidExperimentException, match="MANUAL_STEP"):
            context.wrap_lr_scheduler(plateau(opt), StepMode.STEP_EVERY_EPOCH)
        with pytest.raises(InvalidExperimentException, match="wrap_optimizer"):
            context.wrap_lr_scheduler(torch.optim.lr_scheduler.StepLR(other, 1),
                                      StepMode.STEP_EVERY_BATCH)
        with pytest.raises(InvalidExperimentException, match="wrap_optimizer"):
            context.wrap_lr_scheduler(plateau(other), StepMode.MANUAL_STEP)
        assert context.lr_schedulers == []
        sched = plateau(opt)
        assert context.wrap_lr_scheduler(sched, StepMode.MANUAL_STEP, frequency=0) is sched
        assert len(context.lr_schedulers) == 1


def test_schedules_of_steps_as_periods(tmp_path: Path) -> None:
    """``Batch([...])``/``Epoch([...])`` periods, as Determined's: validations, checkpoints
    and reports at the steps they hold (an epoch schedule at the end of those epochs)."""
    _, records = _fit(tmp_path, batches=12, reporting=det.pytorch.Batch([2, 7]),
                      validation_period=det.pytorch.Epoch([1, 2]),
                      checkpoint_period=det.pytorch.Batch((3, 5)), checkpoint_policy="none")
    steps = {kind: [r["steps"] for r in records if r["kind"] == kind]
             for kind in ("training", "validation", "checkpoint")}
    assert steps == {"training": [2, 3, 4, 5, 7, 8, 12], "validation": [4, 8, 12],
                     "checkpoint": [3, 5, 12]}


def test_a_schedule_as_max_length_is_refused_before_the_trial_starts(tmp_path: Path) -> None:
    started: list[int] = []

    class Startup(det.pytorch.PyTorchCallback):
        def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
            started.append(first_batch_idx)

    cls = type("Scheduled", (Tiny,), {"build_callbacks": lambda self: {"s": Startup()}})
    with pytest.raises(DethpcError, match="schedule of steps, not a length"):
        _fit(tmp_path, cls, batches=det.pytorch.Batch([2, 4]))
    assert started == []


@pytest.mark.parametrize(("max_length", "ends", "warned"), [
    (10, 6, True), (6, 6, False), (4, 4, True), (det.pytorch.Epoch(2), 6, True)])
def test_fit_max_length_against_the_asha_searchers_length(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, max_length: Any, ends: int,
        warned: bool) -> None:
    """ASHA's ``time_metric: batches, max_time: 6``: a ``max_length`` that is not
    ``Batch(6)`` is warned about, as Determined's ``fit`` warns. Shorter, the trial ends
    at its own length (as Determined's); longer, at the searcher's length, where its top
    rung ranks it (Determined trains on until the searcher's stop at its first
    validation there reaches it: the divergence ``docs/searchers.md`` states)."""
    exp = tmp_path / "exp"
    (exp / "trials" / "1").mkdir(parents=True)
    (exp / "config.yaml").write_text(json.dumps({"searcher": {
        "name": "asha", "metric": "val", "time_metric": "batches", "max_time": 6,
        "max_trials": 4}}))
    (exp / "trials" / "1" / "target.json").write_text(json.dumps(
        {"unit": "batches", "length": 6, "validate_at": [2, 6]}))
    with caplog.at_level("WARNING", logger="dethpc.pytorch._trainer"):
        _, records = _fit(tmp_path, batches=max_length)
    assert [r["steps"] for r in records if r["kind"] == "training"][-1] == ends
    assert [r["steps"] for r in records if r["kind"] == "validation"] == [2, ends]
    said = [r.getMessage() for r in caplog.records if "does not match" in r.getMessage()]
    assert bool(said) == warned, said
    if warned:
        assert "searcher.time_metric and max_time" in said[0] and "Batch(value=6)" in said[0]


@pytest.mark.parametrize(("wins", "max_length", "ends"), [
    (True, 10, 10), (True, 4, 4), (True, None, 6), (True, det.pytorch.Epoch(3), 12),
    # a target.json written before the key (or ASHA's): the searcher's length caps
    (None, 10, 6), (False, 10, 6), (False, 4, 4)])
def test_fit_max_length_decides_under_a_searcher_that_stops_no_trial(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, wins: bool | None,
        max_length: Any, ends: int) -> None:
    """``single``'s target (``searcher.max_length: {batches: 6}``, ``fit_length_wins``):
    as Determined 0.38's ``fit``, ``max_length`` decides, longer or shorter, and the
    searcher's length is only the length of a ``fit`` without one, and no validation
    point; nothing is warned (no ASHA ``time_metric``)."""
    exp = tmp_path / "exp"
    (exp / "trials" / "1").mkdir(parents=True)
    (exp / "config.yaml").write_text(json.dumps({"searcher": {
        "name": "single", "metric": "val", "max_length": {"batches": 6}}}))
    target: dict[str, Any] = {"unit": "batches", "length": 6, "validate_at": [6]}
    if wins is not None:
        target["fit_length_wins"] = wins
    (exp / "trials" / "1" / "target.json").write_text(json.dumps(target))
    with caplog.at_level("WARNING", logger="dethpc.pytorch._trainer"):
        _, records = _fit(tmp_path, batches=max_length, validation_period=_unit(5))
    assert [r["steps"] for r in records if r["kind"] == "training"][-1] == ends
    # at the period and the end; never at the searcher's 6 unless it is the end
    assert [r["steps"] for r in records if r["kind"] == "validation"] == sorted(
        {*range(5, ends, 5), ends})
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


@pytest.mark.parametrize(("override", "error", "match"), [
    ({"evaluation_reducer": lambda self: {"val": "sum"}}, DethpcError,
     "must return a det.pytorch.Reducer"),
    # as Determined: exactly one of evaluate_batch and evaluate_full_dataset
    ({"evaluate_full_dataset": lambda self, data_loader: {}}, DethpcError, "exactly one"),
    ({"build_callbacks": lambda self: [object()]}, DethpcError, "dict of name"),
])
def test_the_trainer_refuses_what_it_does_not_run(tmp_path: Path, override: dict[str, Any],
                                                 error: type[Exception], match: str) -> None:
    cls = type("Asks", (Tiny,), override)
    with pytest.raises(error, match=match):
        _fit(tmp_path, cls)
    assert not (tmp_path / "exp" / "trials" / "1" / "metrics.jsonl").exists()


def test_avg_reducer_and_torch_loader_are_fine(tmp_path: Path) -> None:
    cls = type("Avg", (Tiny,), {"evaluation_reducer": lambda self: det.pytorch.Reducer.AVG})
    _, records = _fit(tmp_path, lambda c: cls(c, torch.utils.data.DataLoader))
    assert any(r["kind"] == "validation" for r in records)


def test_wrap_optimizer_refuses_aggregation_and_loader_refuses_sharding() -> None:
    with preserved_rng(), core.init(env={}, exit_on_preempt=False) as ctx:
        context = det.pytorch.PyTorchTrialContext(ctx)
        opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        with pytest.raises(DethpcError, match="backward_passes_per_step=2"):
            context.wrap_optimizer(opt, backward_passes_per_step=2)
        with pytest.raises(DethpcError, match="fp16_compression"):
            context.wrap_optimizer(opt, fp16_compression=True)
        with pytest.raises(DethpcError, match="frequency"):
            context.wrap_lr_scheduler(object(), StepMode.STEP_EVERY_BATCH, frequency=0)
        loader = det.pytorch.DataLoader([1, 2])
        assert loader.get_data_loader() is loader
        sharded = loader.get_data_loader(num_replicas=2, rank=1)
        assert [b.tolist() for b in sharded] == [[2]]   # Determined's: every 2nd batch
        with pytest.raises(UnsupportedError, match="apex"):
            context.configure_apex_amp(None, None)


def test_to_device_and_data_length() -> None:
    import numpy as np

    moved = det.pytorch.to_device({"a": [np.ones(2)], "b": ("s", torch.zeros(3))}, "cpu")
    assert isinstance(moved["a"][0], torch.Tensor) and moved["b"][0] == "s"
    assert det.pytorch.data_length({"x": torch.zeros(5, 2)}) == 5
    assert det.pytorch.data_length([np.zeros(3)]) == 3
    with pytest.raises(DethpcError):
        det.pytorch.data_length([])


def test_train_unit_should_stop() -> None:
    unit = det.pytorch.TrainUnit(3)
    assert [unit.should_stop(s) for s in (0, 1, 3, 6, 7)] == [False, False, True, True, False]
    assert det.pytorch.TrainUnit(0).should_stop(5)
    assert isinstance(det.pytorch.Batch(2), det.pytorch.TrainUnit)
