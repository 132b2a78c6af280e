"""DDP proof: all_reduce + a few DDP steps; rank 0 writes results as JSON.

Usage: ddp_train.py OUT.json [--single]  (--single: one process, the whole batch)
Every rank takes its slice of a fixed global batch, so DDP's averaged gradient
equals the single-process gradient of the whole batch: final weights must match.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

GLOBAL_BATCH, STEPS, LR = 16, 5, 0.1


def model_and_data():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    x = torch.randn(STEPS, GLOBAL_BATCH, 4)
    y = x.sum(-1, keepdim=True) * 0.5
    return model, x, y


def train(model, x, y, rank, world):
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    per = GLOBAL_BATCH // world
    for step in range(STEPS):
        xs, ys = x[step, rank * per:(rank + 1) * per], y[step, rank * per:(rank + 1) * per]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
    net = model.module if hasattr(model, "module") else model
    return [p.detach().flatten().tolist() for p in net.parameters()]


def main():
    out = sys.argv[1]
    model, x, y = model_and_data()
    if "--single" in sys.argv:
        json.dump({"weights": train(model, x, y, 0, 1)}, open(out, "w"))
        return
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    print(f"all_reduce={t.item()} world={world}", flush=True)
    weights = train(torch.nn.parallel.DistributedDataParallel(model), x, y, rank, world)
    where = {"rank": rank, "node": os.environ.get("SLURMD_NODENAME"),
             "node_id": os.environ.get("SLURM_NODEID"), "local_rank": os.environ.get("LOCAL_RANK"),
             "python": sys.executable}
    placed = [None] * world
    dist.all_gather_object(placed, where)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"world": world, "allreduce": t.item(), "weights": weights,
                       "placed": placed,
                       "env": {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT")}},
                      f)
    dist.barrier()  # no rank tears gloo down while a peer still talks to it
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
