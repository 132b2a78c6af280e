"""The bench's trial: examples/digits' train.py with time marks (bench/trial_start).

Marks (``time.time()``) go to the JSON file named by ``BENCH_MARKS``: the script's first
line, numpy and torch imported, dethpc's imports done (``dethpc.core``,
``dethpc.pytorch``), the user's model_def imported, ``core.init`` done, the time spent in
the user's own trial code before the first batch (its ``__init__``, where the model
and the optimizer are built, and its data loaders), the first batch's start and end,
and the script's last line; each also in CPU seconds of this process (``cpu.<mark>``:
what the shared cores' load blurs least).
"""

import time

T0 = time.time()
C0 = time.process_time()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

MARKS: dict[str, Any] = {"first_line": T0, "cpu.first_line": C0}
USER_S = [0.0]
USER_CPU_S = [0.0]


def mark(key: str) -> None:
    """Wall time at ``key``, and this process's CPU seconds at ``cpu.<key>``."""
    MARKS.setdefault(key, time.time())
    MARKS.setdefault("cpu." + key, time.process_time())


import numpy  # noqa: E402, F401
import torch  # noqa: E402, F401

mark("torch_imported")

import dethpc.core  # noqa: E402
from dethpc.pytorch import Batch, PyTorchTrialContext, Trainer, init_distributed  # noqa: E402

mark("dethpc_imported")
MARKS["dynamo_at_start"] = "torch._dynamo" in sys.modules

from model_def import DigitsTrial  # noqa: E402

mark("user_imported")


class TimedTrial(DigitsTrial):
    def __init__(self, context: PyTorchTrialContext) -> None:
        # dethpc's imports, core.init and the context: torch._dynamo not imported yet
        MARKS["dynamo_before_user_init"] = "torch._dynamo" in sys.modules
        t, c = time.time(), time.process_time()
        super().__init__(context)
        USER_S[0] += time.time() - t
        USER_CPU_S[0] += time.process_time() - c
        MARKS["user_init_s"] = time.time() - t

    def build_training_data_loader(self) -> Any:
        t, c = time.time(), time.process_time()
        try:
            return super().build_training_data_loader()
        finally:
            USER_S[0] += time.time() - t
            USER_CPU_S[0] += time.process_time() - c

    def build_validation_data_loader(self) -> Any:
        t, c = time.time(), time.process_time()
        try:
            return super().build_validation_data_loader()
        finally:
            USER_S[0] += time.time() - t
            USER_CPU_S[0] += time.process_time() - c

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        if "first_batch_start" in MARKS:
            return super().train_batch(batch, epoch_idx, batch_idx)
        mark("first_batch_start")
        MARKS["user_before_first_batch_s"] = USER_S[0]
        MARKS["cpu.user_before_first_batch_s"] = USER_CPU_S[0]
        out = super().train_batch(batch, epoch_idx, batch_idx)
        mark("first_batch_end")
        return out


def main() -> None:
    with dethpc.core.init(distributed=init_distributed()) as core_context:
        mark("core_init_done")
        context = PyTorchTrialContext(core_context, hparams=dict(core_context.hparams))
        trial = TimedTrial(context)
        Trainer(trial, context).fit(max_length=Batch(1))
    mark("last_line")
    MARKS["modules"] = len(sys.modules)
    with open(os.environ["BENCH_MARKS"], "w") as fh:
        json.dump(MARKS, fh)


if __name__ == "__main__":
    main()
