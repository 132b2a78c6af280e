"""Forces the teardown race that aborted finished distributed jobs (exit 134).

Usage: gil_at_exit.py OUT_DIR  (every rank writes OUT_DIR/rank-R.json, then leaves)

On every rank but 0, a callback is chained to an async all_reduce; torch runs it
on gloo's C++ worker thread. The callback waits until interpreter finalization
frees the modules (``SignalsTeardown.__del__``) and then takes the GIL. Run bare
(``python gil_at_exit.py``), CPython 3.11 ends the thread with ``pthread_exit``
and the C++ runtime aborts: "terminate called without an active exception".
Under dethpc's exit guard (``dethpc.launch._run_main``) the process never
enters finalization with torch's threads alive and the rank exits 0. No timing
is involved: rank 0 joins the all_reduce only after every other rank has chained
its callback (TCPStore keys), so the callback always runs on the worker thread,
never inline.
"""

import json
import os
import sys
import threading
import time
import types
from pathlib import Path

import torch
import torch.distributed as dist

teardown = threading.Event()


class SignalsTeardown:
    def __del__(self, _set=teardown.set, _sleep=time.sleep):  # globals may be gone by now
        _set()
        # GIL released: the callback thread wakes and takes it, and the process aborts
        # at once; the margin is for a thread that a loaded machine schedules late (run
        # under dethpc's exit guard, finalization and this method never happen)
        _sleep(15.0)


def late_callback(fut, _wait=teardown.wait):
    _wait(120)
    return fut.value()


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        store.wait([f"chained-{r}" for r in range(1, world)])
        dist.all_reduce(torch.ones(1))
    else:
        work = dist.all_reduce(torch.ones(1), async_op=True)
        globals()["pending"] = work.get_future().then(late_callback)
        store.set(f"chained-{rank}", "1")
    record = {"rank": rank, "world": world, "node": os.environ.get("SLURMD_NODENAME")}
    (out / f"rank-{rank}.json").write_text(json.dumps(record))
    # a module of its own: finalization frees it with the other modules, and nothing
    # else keeps it alive (the callback keeps this file's namespace alive)
    if rank != 0:  # rank 0 chained nothing: nothing to wait for at its exit
        sys.modules["_gil_at_exit_holder"] = holder = types.ModuleType("_gil_at_exit_holder")
        holder.signal = SignalsTeardown()


if __name__ == "__main__":
    main()
