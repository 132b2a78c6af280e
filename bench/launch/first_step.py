"""Benchmark payload: init gloo, do one all_reduce (the 'first training step'), record the time."""

import os
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
if dist.get_rank() == 0:
    with open(sys.argv[1], "w") as fh:
        fh.write(f"{time.time()}\n")
dist.barrier()  # no rank tears gloo down while a peer still talks to it
dist.destroy_process_group()
os._exit(0)
