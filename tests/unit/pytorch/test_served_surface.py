"""dethpc-side checks of what Determined serves without a master, where Determined's
local mode cannot be the oracle (``tests/local/test_determined_oracle.py`` compares the
rest): callback state across a stop and resume on a cluster-like trial directory,
shutdown hooks after an error, the cross-rank step of custom reducers, the previous
checkpoint format, and ``load_trial_from_checkpoint_path``'s errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import dethpc as det  # noqa: E402
import dethpc.core as core  # noqa: E402
from dethpc.common.errors import DethpcError  # noqa: E402
from dethpc.pytorch._reducer import ReducerSet  # noqa: E402
from dethpc.pytorch._state import preserved_rng  # noqa: E402
from dethpc.pytorch._trainer import upgrade_state  # noqa: E402

CALLS: list[tuple[str, Any]] = []


class Counting(det.pytorch.PyTorchCallback):
    """Counts the batches it saw, across checkpoints."""

    def __init__(self, name: str) -> None:
        self.name, self.batches = name, 0

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        CALLS.append((f"{self.name}.startup", (first_batch_idx, checkpoint_uuid is not None)))

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        CALLS.append((f"{self.name}.epoch_end", epoch_idx))

    def on_training_workload_end(self, avg_metrics: dict[str, Any],
                                 batch_metrics: list[dict[str, Any]]) -> None:
        self.batches += len(batch_metrics)

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        CALLS.append((f"{self.name}.load", dict(state_dict)))
        self.batches = state_dict["batches"]

    def on_trial_shutdown(self) -> None:
        CALLS.append((f"{self.name}.shutdown", self.batches))


class Trial(det.pytorch.PyTorchTrial):
    stop_at: int | None = None
    fail_at: int | None = None

    def __init__(self, context: Any) -> None:
        self.context = context
        self.model = context.wrap_model(torch.nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))
        self.callbacks = {"a": Counting("a"), "b": Counting("b")}

    def _data(self) -> Any:
        return det.pytorch.DataLoader(torch.utils.data.TensorDataset(torch.ones(8, 1)),
                                      batch_size=2)

    build_training_data_loader = _data
    build_validation_data_loader = _data

    def build_callbacks(self) -> dict[str, Any]:
        return self.callbacks

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        if batch_idx == self.fail_at:
            raise RuntimeError("boom")
        if batch_idx + 1 == self.stop_at:
            self.context.set_stop_requested(True)
        loss = self.model(batch[0]).pow(2).mean()
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        return {"val": self.model(batch[0]).mean()}


def _fit(trial_dir: Path, cls: type = Trial, batches: int = 6,
         **fit: Any) -> list[dict[str, Any]]:
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "hparams.json").write_text("{}")
    env = {"DETHPC_TRIAL_DIR": str(trial_dir), "DETHPC_TRIAL_ID": "1",
           "DETHPC_EXPERIMENT_ID": "1"}
    with preserved_rng(), core.init(env=env, exit_on_preempt=False) as ctx:
        context = det.pytorch.PyTorchTrialContext(ctx)
        assert ctx.info.on_cluster
        det.pytorch.Trainer(cls(context), context).fit(
            max_length=det.pytorch.Batch(batches), reporting_period=det.pytorch.Batch(1),
            **fit)
    return [json.loads(line) for line in (trial_dir / "metrics.jsonl").read_text().splitlines()]


def test_callback_state_survives_a_stop_and_resume(tmp_path: Path) -> None:
    CALLS.clear()
    _fit(tmp_path / "t", type("Stops", (Trial,), {"stop_at": 3}))
    assert CALLS == [("a.startup", (0, False)), ("b.startup", (0, False)),
                     ("b.shutdown", 3), ("a.shutdown", 3)]
    CALLS.clear()
    records = _fit(tmp_path / "t")  # on a cluster the latest checkpoint is resumed
    assert CALLS == [("a.startup", (3, True)), ("b.startup", (3, True)),
                     ("a.load", {"batches": 3}), ("b.load", {"batches": 3}),
                     ("a.epoch_end", 0), ("b.epoch_end", 0),
                     ("b.shutdown", 6), ("a.shutdown", 6)]
    # the callbacks' state is in the checkpoint under their names
    ckpts = [r for r in records if r["kind"] == "checkpoint"]
    state = torch.load(tmp_path / "t" / "checkpoints" / ckpts[-1]["uuid"] / "state.pt",
                       weights_only=False)
    assert state["callbacks"] == {"a": {"batches": 6}, "b": {"batches": 6}}
    assert state["format"] == "dethpc.pytorch/2"


def test_shutdown_hooks_run_after_an_error(tmp_path: Path) -> None:
    CALLS.clear()
    with pytest.raises(RuntimeError, match="boom"):
        _fit(tmp_path / "t", type("Fails", (Trial,), {"fail_at": 1}))
    assert [c for c, _ in CALLS] == ["a.startup", "b.startup", "b.shutdown", "a.shutdown"]


def test_best_policy_on_a_cluster_checkpoints_a_better_validation(tmp_path: Path) -> None:
    """Determined's checkpoint_policy 'best' on a cluster (its local mode falls back to
    'all', which the oracle compares): a validation that beats the experiment's best."""
    trial_dir = tmp_path / "exp" / "trials" / "1"
    trial_dir.mkdir(parents=True)
    (trial_dir / "config.yaml").write_text("searcher: {metric: val, smaller_is_better: true}\n")
    records = _fit(trial_dir, batches=4, validation_period=det.pytorch.Batch(2))
    kinds = [(r["kind"], r["steps"]) for r in records if r["kind"] != "training"]
    # the first validation is the experiment's best so far: checkpointed after it
    assert kinds[:2] == [("validation", 2), ("checkpoint", 2)]
    none = _fit(tmp_path / "none", batches=4, validation_period=det.pytorch.Batch(2),
                checkpoint_policy="none")
    assert [(r["kind"], r["steps"]) for r in none if r["kind"] != "training"] == [
        ("validation", 2), ("validation", 4), ("checkpoint", 4)]


def test_reducers_combine_ranks_in_dataset_order() -> None:
    """The cross-rank step (2 ranks on the dev cluster is the end-to-end check): a
    function reducer sees the values of a sharded loader back in the dataset's order."""
    rank0, rank1 = ReducerSet(lambda x: [x]), ReducerSet(lambda x: [x])
    for reducers, values in ((rank0, [0, 2, 4]), (rank1, [1, 3])):
        r = reducers.wrap(list, "order", True, True)
        for v in values:
            r.update(v)  # type: ignore[attr-defined]
    mine0 = [e.reducer.per_slot_reduce() for e in rank0.entries]
    mine1 = [e.reducer.per_slot_reduce() for e in rank1.entries]
    both = ReducerSet(lambda _x: [mine0, mine1])
    both.entries = rank0.entries
    assert both.reduce(for_training=True) == {"order": [0, 1, 2, 3, 4]}
    assert both.reduce(for_training=False) == {"order": [0, 1, 2, 3, 4]}


def test_reducer_results_must_match_their_name() -> None:
    reducers = ReducerSet(lambda x: [x])
    reducers.wrap(lambda vs: 1.0, None, True, False)
    with pytest.raises(ValueError, match="without a name"):
        reducers.reduce(for_training=True)
    assert reducers.reduce(for_training=False) == {}
    other = ReducerSet(lambda x: [x])
    other.wrap(lambda vs: {"a": 1.0}, "named", True, True)
    with pytest.raises(ValueError, match="returned a dict"):
        other.reduce(for_training=True)
    fn = other.entries[0].reducer
    with pytest.raises(ValueError, match="twice"):
        other.wrap(fn, None, True, True)
    with pytest.raises(TypeError, match="MetricReducer"):
        other.wrap(3, None, True, True)


def test_a_previous_format_checkpoint_still_loads() -> None:
    old = {"format": "dethpc.pytorch/1", "models": [{}], "optimizers": [{}],
           "lr_schedulers": [], "scaler": None, "progress": {}, "rng": []}
    new = upgrade_state(old)
    assert new["models_state_dict"] == [{}] and new["optimizers_state_dict"] == [{}]
    assert "scaler_state_dict" not in new and new["callbacks"] == {}


def test_load_trial_from_a_directory_that_is_no_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(DethpcError, match="load_data.json"):
        det.pytorch.load_trial_from_checkpoint_path(str(tmp_path))
    (tmp_path / "load_data.json").write_text(json.dumps({"trial_cls_spec": "nowhere:Trial"}))
    with pytest.raises(DethpcError, match="could not import the trial class nowhere:Trial"):
        det.pytorch.load_trial_from_checkpoint_path(str(tmp_path))


def test_use_amp_on_cpu_is_full_precision_and_checkpointed(tmp_path: Path) -> None:
    """On CPU Determined's use_amp is off (its CUDA scaler and autocast disable
    themselves); the scaler is still wrapped (its state checkpointed) and the model is
    the same object."""
    with preserved_rng(), core.init(env={}, exit_on_preempt=False) as ctx:
        context = det.pytorch.PyTorchTrialContext(ctx)
        context.experimental.use_amp()
        model = torch.nn.Linear(1, 1)
        assert context.wrap_model(model) is model
        assert context.scaler is not None and not context.scaler.is_enabled()
        with pytest.raises(DethpcError, match="already"):
            context.wrap_scaler(torch.amp.GradScaler("cpu"))


def test_evaluation_reducer_must_name_every_metric(tmp_path: Path) -> None:
    """As Determined's: a dict of reducers names every validation metric."""
    cls = type("Partial", (Trial,), {"evaluation_reducer": lambda self: {
        "other": det.pytorch.Reducer.SUM}})
    with pytest.raises(DethpcError, match="one for every validation metric"):
        _fit(tmp_path / "t", cls, batches=2)


def test_autocast_forward_pass_hooks_on_a_cuda_context() -> None:
    """The CUDA path's plumbing, on this CPU machine (no GPU here: the device machine
    was not lent to this work): the module is the same object, float16 outputs come
    back as float32, and the autocast region is left also when forward raises."""
    import warnings

    from dethpc.pytorch._trial import _to_float32

    with preserved_rng(), core.init(env={}, exit_on_preempt=False) as ctx:
        context = det.pytorch.PyTorchTrialContext(ctx)
        context.device = torch.device("cuda")     # only read by autocast_forward_pass

        class Half(torch.nn.Module):
            fail = False

            def forward(self, x: torch.Tensor) -> Any:
                if self.fail:
                    raise ValueError("inside forward")
                return {"y": [x.half()], "n": 3}

        model = Half()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")       # CUDA autocast without CUDA: disabled
            assert context.autocast_forward_pass(model) is model
            out = model(torch.ones(2))
            assert out["y"][0].dtype == torch.float32 and out["n"] == 3
            model.fail = True
            with pytest.raises(ValueError, match="inside forward"):
                model(torch.ones(2))
            assert not torch.is_autocast_enabled("cuda")
    nested = _to_float32((torch.ones(1, dtype=torch.float16), [torch.ones(1)]))
    assert nested[0].dtype == torch.float32 and nested[1][0].dtype == torch.float32
