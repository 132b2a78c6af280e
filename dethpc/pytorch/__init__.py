"""The PyTorch Trial API on top of ``dethpc.core``.

Owns: the public names ``PyTorchTrial``, ``PyTorchTrialContext``, ``Trainer``,
``Batch``, ``Epoch``, ``StepMode``, ``init``, ``init_distributed`` and
``run_test_mode``. Names are loaded lazily so that ``run_test_mode``, ``Batch``
and ``Epoch`` can be imported without torch (the CLI does).
Must not: import torch at package import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dethpc.pytorch._test_mode import entrypoint_argv, run_test_mode
from dethpc.pytorch._units import Batch, Epoch, TrainUnit

if TYPE_CHECKING:
    from dethpc.pytorch._init import init, init_distributed
    from dethpc.pytorch._trainer import Trainer
    from dethpc.pytorch._trial import PyTorchTrial, PyTorchTrialContext, StepMode

_LAZY = {
    "PyTorchTrial": "dethpc.pytorch._trial",
    "PyTorchTrialContext": "dethpc.pytorch._trial",
    "StepMode": "dethpc.pytorch._trial",
    "Trainer": "dethpc.pytorch._trainer",
    "init": "dethpc.pytorch._init",
    "init_distributed": "dethpc.pytorch._init",
}

__all__ = ["Batch", "Epoch", "PyTorchTrial", "PyTorchTrialContext", "StepMode", "Trainer",
           "TrainUnit", "entrypoint_argv", "init", "init_distributed", "run_test_mode"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dethpc.pytorch' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
