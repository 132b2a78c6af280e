"""``det.pytorch.deepspeed`` without DeepSpeed running: the import stays light, the
context's checks and refusals, the model-parallel units. (Training, checkpoints and
resume on CPU DeepSpeed: tests/local/test_deepspeed_trial.py.)"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import dethpc as det  # noqa: E402
import dethpc.core as core  # noqa: E402
from dethpc.common.errors import DethpcError, UnsupportedError  # noqa: E402
from dethpc.pytorch import deepspeed as det_ds  # noqa: E402
from dethpc.pytorch._state import preserved_rng  # noqa: E402


def test_importing_dethpc_pytorch_and_its_deepspeed_module_imports_no_deepspeed() -> None:
    code = ("import sys, dethpc.pytorch, dethpc.pytorch.deepspeed as d; "
            "d.DeepSpeedTrial, d.DeepSpeedTrialContext, d.Trainer; "
            "print('deepspeed' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def _context(tmp_path: Any) -> Any:
    trial_dir = tmp_path / "exp" / "trials" / "1"
    trial_dir.mkdir(parents=True)
    (trial_dir / "hparams.json").write_text('{"global_batch_size": 8}')
    env = {"DETHPC_TRIAL_DIR": str(trial_dir), "DETHPC_TRIAL_ID": "1",
           "DETHPC_EXPERIMENT_ID": "1"}
    with preserved_rng(), core.init(env=env, exit_on_preempt=False) as ctx:
        return det_ds.DeepSpeedTrialContext(ctx)


def test_the_context_refuses_pytorch_wrapping_and_asks_for_an_engine_first(tmp_path: Any
                                                                           ) -> None:
    context = _context(tmp_path)
    model = torch.nn.Linear(1, 1)
    for call in (lambda: context.wrap_model(model),
                 lambda: context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=1)),
                 lambda: context.backward(model(torch.ones(1)).sum())):
        with pytest.raises(DethpcError, match="engine.backward"):
            call()
    with pytest.raises(DethpcError, match="wrap_model_engine"):
        context.get_train_micro_batch_size_per_gpu()
    with pytest.raises(DethpcError, match="wrap_model_engine"):
        context.set_mpu(det_ds.make_data_parallel_mpu(context.distributed))
    assert context.get_hparams() == {"global_batch_size": 8}
    assert context.get_global_batch_size() == 8
    assert context.mpu == det_ds.ModelParallelUnit(0, 1, True, True)


def test_the_deepspeed_mpu_builds_loaders_on_the_first_and_last_stage_only() -> None:
    def grid(stage: int, slice_rank: int = 0) -> Any:
        return SimpleNamespace(get_pipe_parallel_rank=lambda: stage,
                               get_pipe_parallel_world_size=lambda: 3,
                               get_slice_parallel_rank=lambda: slice_rank,
                               get_data_parallel_rank=lambda: 1,
                               get_data_parallel_world_size=lambda: 2)

    built = [det_ds.make_deepspeed_mpu(grid(s)).should_build_data_loader for s in range(3)]
    assert built == [True, False, True]
    assert not det_ds.make_deepspeed_mpu(grid(0, slice_rank=1)).should_build_data_loader
    assert det_ds.make_deepspeed_mpu(grid(0)).data_parallel_world_size == 2


def test_the_legacy_controller_refuses_and_the_trial_class_attributes_answer() -> None:
    with pytest.raises(UnsupportedError, match="DeepSpeedTrialController"):
        det_ds.DeepSpeedTrialController()
    # what Determined's harness reads of a trial class: its context class; no controller
    assert det_ds.DeepSpeedTrial.trial_context_class is det_ds.DeepSpeedTrialContext
    assert det_ds.DeepSpeedTrial.trial_controller_class is None
    assert det.pytorch.PyTorchTrial.trial_context_class is det.pytorch.PyTorchTrialContext
    assert det.pytorch.PyTorchTrial.trial_controller_class is None
    assert det.pytorch.deepspeed.overwrite_deepspeed_config(
        {"a": {"b": 1, "c": 2}}, {"a": {"b": 3}}) == {"a": {"b": 3, "c": 2}}


@pytest.mark.parametrize(("env", "sets"), [
    ({}, True),                                           # python3 ds_trial.py, one slot
    ({"WORLD_SIZE": "2", "RANK": "1"}, False),            # a launcher set the world
    ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "h",
      "MASTER_PORT": "1"}, False),                        # all there already
])
def test_a_single_process_trial_gets_a_world_of_one(env: dict[str, str], sets: bool) -> None:
    """Without it, the user's deepspeed.initialize() in a one-slot Slurm job discovers
    its world through mpi4py's MPI_Init, fatal in a step without PMI (the dev cluster's
    surface test: 'OMPI was not built with SLURM's PMI support')."""
    from dethpc.pytorch._deepspeed import DEEPSPEED_ENV, single_process_env

    before = dict(env)
    assert single_process_env(env) is sets
    if sets:
        assert all(k in env for k in DEEPSPEED_ENV)
        assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("0", "1", "127.0.0.1")
    else:
        assert env == before
