"""``dethpc.pytorch.init()`` waits for every rank before tearing the process group down
when they all leave together, so no rank destroys gloo while a peer still talks to it
(that race aborted a finished rank with 134 on the dev cluster). Two real gloo ranks
on this machine: rank 1 stays inside ``init()`` 1.5 s longer; rank 0 must not have
torn down before rank 1 left."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RANK = """
import json, sys, time
from dethpc.pytorch import init
with init(hparams={}) as ctx:
    if ctx.distributed.rank == 1:
        time.sleep(1.5)
    left = time.time()
print(json.dumps({"left": left, "torn_down": time.time()}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ranks_leave_init_together() -> None:
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": str(REPO), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    env.pop("DETHPC_TRIAL_DIR", None)
    procs = [subprocess.Popen([sys.executable, "-c", RANK], stdout=subprocess.PIPE, text=True,
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
             for r in (0, 1)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    rank0, rank1 = (json.loads(o.strip().splitlines()[-1]) for o in outs)
    assert rank0["torn_down"] >= rank1["left"], (rank0, rank1)
