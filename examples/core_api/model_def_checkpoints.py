"""Stage 3, checkpoints and preemption: ``store_path`` / ``restore_path``,
``det.get_cluster_info().latest_checkpoint`` and ``preempt.should_preempt()``.

Pause the experiment (``dethpc experiment pause``) or let Slurm preempt the job:
the loop checkpoints and returns; when the trial runs again it continues from
the latest checkpoint. Determined 0.38 Core API; only the import differs.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import time

import torch

import dethpc as det


def save_state(model: torch.nn.Module, opt: torch.optim.Optimizer, steps_completed: int,
               trial_id: int, path: pathlib.Path) -> None:
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path / "state.pt")
    with path.joinpath("state").open("w") as f:
        f.write(f"{steps_completed},{trial_id}")


def load_state(model: torch.nn.Module, opt: torch.optim.Optimizer, trial_id: int,
               path: pathlib.Path) -> int:
    state = torch.load(path / "state.pt")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    with path.joinpath("state").open("r") as f:
        steps_completed, ckpt_trial_id = (int(x) for x in f.read().split(","))
    # a checkpoint of another trial (a continued experiment) starts from step 0
    return steps_completed if ckpt_trial_id == trial_id else 0


def main(core_context: det.core.Context, steps: int, step_time: float) -> None:
    info = det.get_cluster_info()
    assert info is not None, "this example only runs on-cluster"
    torch.manual_seed(info.trial.trial_seed)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    start = 0
    latest_checkpoint = info.latest_checkpoint
    if latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(latest_checkpoint) as path:
            start = load_state(model, opt, info.trial.trial_id, path)
        logging.info("resumed from checkpoint %s at step %d", latest_checkpoint, start)

    for step in range(start, steps):
        x = torch.randn(32, 1)
        loss = torch.nn.functional.mse_loss(model(x), 2 * x - 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(step_time)
        steps_completed = step + 1
        if steps_completed % 10 == 0 or steps_completed == steps:
            core_context.train.report_training_metrics(
                steps_completed=steps_completed, metrics={"train_loss": loss.item()})
            with torch.no_grad():
                x = torch.linspace(-1, 1, 64).unsqueeze(1)
                val = torch.nn.functional.mse_loss(model(x), 2 * x - 1).item()
            core_context.train.report_validation_metrics(
                steps_completed=steps_completed, metrics={"val_loss": val})
            checkpoint_metadata = {"steps_completed": steps_completed}
            with core_context.checkpoint.store_path(checkpoint_metadata) as (path, storage_id):
                save_state(model, opt, steps_completed, info.trial.trial_id, path)
            if core_context.preempt.should_preempt():
                logging.info("preempted after step %d (checkpoint %s)", steps_completed,
                             storage_id)
                return


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step-time", type=float, default=0.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        main(core_context, args.steps, args.step_time)
