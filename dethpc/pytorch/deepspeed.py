"""Determined's ``det.pytorch.deepspeed``: its DeepSpeed Trial API.

Owns: the public names, loaded lazily from ``dethpc.pytorch._deepspeed`` (which imports
torch; deepspeed itself only when an engine is wrapped): ``DeepSpeedTrial``,
``DeepSpeedTrialContext``, ``Trainer``, ``init``, ``ModelParallelUnit``,
``make_data_parallel_mpu``, ``make_deepspeed_mpu``; ``overwrite_deepspeed_config``, a
plain dict merge; and the refusal of Determined's internal ``DeepSpeedTrialController``
(and of any other name).
Must not: import torch or deepspeed at import time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dethpc.common.errors import DethpcError
from dethpc.common.util import merge_dicts
from dethpc.core._refused import module_getattr, refused_class

_PKG = "determined.pytorch.deepspeed"

if TYPE_CHECKING:
    from dethpc.pytorch._deepspeed import (
        DeepSpeedTrial,
        DeepSpeedTrialContext,
        ModelParallelUnit,
        Trainer,
        init,
        make_data_parallel_mpu,
        make_deepspeed_mpu,
    )

_SERVED = ("DeepSpeedTrial", "DeepSpeedTrialContext", "ModelParallelUnit", "Trainer", "init",
           "make_data_parallel_mpu", "make_deepspeed_mpu")
DeepSpeedTrialController = refused_class(f"{_PKG}.DeepSpeedTrialController")
__all__ = ["DeepSpeedTrial", "DeepSpeedTrialContext", "DeepSpeedTrialController",
           "ModelParallelUnit", "Trainer", "init", "make_data_parallel_mpu",
           "make_deepspeed_mpu", "overwrite_deepspeed_config"]


def overwrite_deepspeed_config(base_ds_config: str | dict[str, Any],
                               source_ds_dict: dict[str, Any]) -> dict[str, Any]:
    """``base_ds_config`` (a dict, or the path of a JSON file) with ``source_ds_dict``
    merged in (``dethpc.common.util.merge_dicts``)."""
    if isinstance(base_ds_config, str):
        try:
            base = json.loads(Path(base_ds_config).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DethpcError(f"DeepSpeed config {base_ds_config}: {exc}") from exc
    else:
        base = base_ds_config
    if not isinstance(base, dict) or not isinstance(source_ds_dict, dict):
        raise DethpcError("overwrite_deepspeed_config() merges two dicts (or a JSON file "
                          "holding one and a dict)")
    return merge_dicts(base, source_ds_dict)


_refuse_other = module_getattr(_PKG)


def __getattr__(name: str) -> Any:
    """The served names from ``dethpc.pytorch._deepspeed``; any other refuses."""
    if name in _SERVED:
        import importlib

        # by its full name: ``from dethpc.pytorch import _deepspeed`` would import the
        # package whose __init__ loads this module (tests/unit/test_import_contract.py)
        return getattr(importlib.import_module("dethpc.pytorch._deepspeed"), name)
    return _refuse_other(name)
