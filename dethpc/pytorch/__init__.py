"""The PyTorch Trial API on top of ``dethpc.core``.

Owns: the public names ``PyTorchTrial``, ``PyTorchTrialContext``, ``Trainer``,
``Batch``, ``Epoch``, ``TrainUnit``, ``StepMode``, ``init``, ``init_distributed`` and
``run_test_mode``, and Determined's other ``det.pytorch`` names: served
(``DataLoader``, ``LRScheduler``, ``Reducer``, ``to_device``, ``PyTorchCallback``,
``MetricReducer``, ``samplers``, ``adapt_batch_sampler``, ``CheckpointLoadContext``,
``load_trial_from_checkpoint_path``, ...), or stand-ins that refuse where used
(``deepspeed``'s Trial API; ``dethpc.core.determined_rules`` classifies each). Names are loaded
lazily so that ``run_test_mode``, ``Batch`` and ``Epoch`` can be imported without torch
(the CLI does).
Must not: import torch at package import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dethpc.pytorch._test_mode import entrypoint_argv, run_test_mode
from dethpc.pytorch._units import Batch, Epoch, TrainUnit

if TYPE_CHECKING:
    from dethpc.pytorch import deepspeed, samplers
    from dethpc.pytorch._callback import PyTorchCallback
    from dethpc.pytorch._init import init, init_distributed
    from dethpc.pytorch._load import CheckpointLoadContext, load_trial_from_checkpoint_path
    from dethpc.pytorch._loader import DataLoader, TorchData, data_length, to_device
    from dethpc.pytorch._reducer import MetricReducer
    from dethpc.pytorch._trainer import Trainer
    from dethpc.pytorch._trial import (
        LRScheduler,
        PyTorchExperimentalContext,
        PyTorchTrial,
        PyTorchTrialContext,
        Reducer,
        StepMode,
    )
    from dethpc.pytorch.samplers import adapt_batch_sampler

_LAZY = {
    "PyTorchTrial": "dethpc.pytorch._trial",
    "PyTorchTrialContext": "dethpc.pytorch._trial",
    "PyTorchExperimentalContext": "dethpc.pytorch._trial",
    "StepMode": "dethpc.pytorch._trial",
    "LRScheduler": "dethpc.pytorch._trial",
    "Reducer": "dethpc.pytorch._trial",
    "Trainer": "dethpc.pytorch._trainer",
    "init": "dethpc.pytorch._init",
    "init_distributed": "dethpc.pytorch._init",
    "DataLoader": "dethpc.pytorch._loader",
    "TorchData": "dethpc.pytorch._loader",
    "to_device": "dethpc.pytorch._loader",
    "data_length": "dethpc.pytorch._loader",
    "PyTorchCallback": "dethpc.pytorch._callback",
    "MetricReducer": "dethpc.pytorch._reducer",
    "CheckpointLoadContext": "dethpc.pytorch._load",
    "load_trial_from_checkpoint_path": "dethpc.pytorch._load",
    "adapt_batch_sampler": "dethpc.pytorch.samplers",
}
_MODULES = ("deepspeed", "samplers")
#: Determined's ``det.pytorch`` names that dethpc refuses: name -> stand-in kind
_REFUSED: dict[str, str] = {}
_STUBS: dict[str, Any] = {}

__all__ = ["Batch", "CheckpointLoadContext", "DataLoader", "Epoch", "LRScheduler",
           "MetricReducer", "PyTorchCallback", "PyTorchExperimentalContext",
           "PyTorchTrial", "PyTorchTrialContext", "Reducer", "StepMode", "TorchData",
           "Trainer", "TrainUnit", "adapt_batch_sampler", "data_length", "deepspeed",
           "entrypoint_argv", "init", "init_distributed", "load_trial_from_checkpoint_path",
           "run_test_mode", "samplers", "to_device"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(module), name)
    if name in _MODULES:
        return importlib.import_module(f"dethpc.pytorch.{name}")
    if name in _REFUSED:
        if name not in _STUBS:
            from dethpc.core._refused import refused_class, refused_function

            make = refused_class if _REFUSED[name] == "class" else refused_function
            _STUBS[name] = make(f"determined.pytorch.{name}")
        return _STUBS[name]
    raise AttributeError(f"module 'dethpc.pytorch' has no attribute {name!r}")
