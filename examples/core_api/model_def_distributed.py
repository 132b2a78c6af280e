"""Stage 5, distributed: one process per slot, started by the launcher of the
entrypoint (``python3 -m determined.launch.torch_distributed python3
model_def_distributed.py``, which dethpc runs through ``dethpc.launch``).

As in Determined's tutorial: ``torch.distributed`` is initialized by the script,
``DistributedContext.from_torch_distributed()`` gives ``core.init`` the ranks,
the data is sharded by ``distributed.rank``/``size``, the model is wrapped in
DDP, and only rank 0 reports metrics and stores checkpoints.
``distributed.allgather`` collects every rank's node index, host and loss. Determined 0.38
Core API; only the import differs.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import dethpc as det


def val_loss(model: torch.nn.Module) -> float:
    x = torch.linspace(-1, 1, 64).unsqueeze(1)
    with torch.no_grad():
        return torch.nn.functional.mse_loss(model(x), 2 * x - 1).item()


def main(core_context: det.core.Context, steps: int) -> None:
    info = det.get_cluster_info()
    assert info is not None, "this example only runs on-cluster"
    rank, size = core_context.distributed.rank, core_context.distributed.size
    torch.manual_seed(info.trial.trial_seed)  # same initial weights on every rank
    model = DDP(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=info.trial.hparams["learning_rate"])

    start = 0
    if info.latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            state = torch.load(pathlib.Path(path) / "model.pt")
            model.module.load_state_dict(state["model"])
            start = state["steps_completed"]

    # each rank draws its own shard of the data stream
    gen = torch.Generator().manual_seed(1000 * rank + start)
    per_rank = info.trial.hparams["global_batch_size"] // size
    for step in range(start, steps):
        x = torch.randn(per_rank, 1, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), 2 * x - 1)
        opt.zero_grad()
        loss.backward()  # DDP averages the gradients over the ranks
        opt.step()
        steps_completed = step + 1
        if steps_completed % 10 == 0 or steps_completed == steps:
            everyone = core_context.distributed.allgather(
                {"rank": rank, "node": core_context.distributed.cross_rank,
                 "host": socket.gethostname(), "loss": loss.item()})
            if rank == 0:
                logging.info("allgather at step %d: %s", steps_completed, everyone)
                core_context.train.report_training_metrics(
                    steps_completed=steps_completed,
                    metrics={"train_loss": sum(float(e["loss"]) for e in everyone) / size})
                core_context.train.report_validation_metrics(
                    steps_completed=steps_completed,
                    metrics={"val_loss": val_loss(model.module), "world_size": len(everyone),
                             "nodes": len({e["node"] for e in everyone})})
                with core_context.checkpoint.store_path(
                        {"steps_completed": steps_completed}) as (path, _storage_id):
                    torch.save({"model": model.module.state_dict(),
                                "steps_completed": steps_completed}, path / "model.pt")
            if core_context.preempt.should_preempt():
                return


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    dist.init_process_group("gloo")
    distributed = det.core.DistributedContext.from_torch_distributed()
    with det.core.init(distributed=distributed) as core_context:
        main(core_context, args.steps)
    dist.destroy_process_group()
