"""DeepSpeed ZeRO-1 proof: a few steps over gloo on CPU; rank 0 writes JSON to argv[1]."""

import json
import os
import sys

import deepspeed
import torch

# DeepSpeed's shared-memory all-reduce (deepspeed_shm_comm) is JIT-built on first use
# (~50 s on 2 cores) and is a one-host optimization; the dev cluster's "nodes" all share
# one host and one /dev/shm, and one run hung inside it. Collectives go over gloo only.
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
config = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1},
          "zero_allow_untested_optimizer": True,
          "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                       config=config)
losses = []
for step in range(3):
    x = torch.randn(4, 4)
    loss = torch.nn.functional.mse_loss(engine(x), x.sum(-1, keepdim=True))
    engine.backward(loss)
    engine.step()
    losses.append(loss.item())
if engine.global_rank == 0:
    json.dump({"world": engine.world_size, "steps": engine.global_steps, "losses": losses,
               "ds_env": os.environ.get("DETHPC_FROM_DS_ENV")},
              open(sys.argv[1], "w"))
