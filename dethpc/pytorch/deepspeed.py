"""Determined's ``det.pytorch.deepspeed``: its DeepSpeed Trial API, refused on dethpc.

Owns: stand-ins for ``DeepSpeedTrial``, ``DeepSpeedTrialContext``, ``Trainer``, ``init``
and the model-parallel helpers (using one says what to do instead: DeepSpeed from a Core
API script under ``python -m determined.launch.deepspeed``, which dethpc runs as
``dethpc.launch.deepspeed``, with ``DistributedContext.from_deepspeed()``), and
``overwrite_deepspeed_config``, a plain dict merge that is served.
Must not: import torch or deepspeed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dethpc.common.errors import DethpcError
from dethpc.common.util import merge_dicts
from dethpc.core._refused import module_getattr, refused_class, refused_function

_PKG = "determined.pytorch.deepspeed"

DeepSpeedTrial = refused_class(f"{_PKG}.DeepSpeedTrial")
DeepSpeedTrialContext = refused_class(f"{_PKG}.DeepSpeedTrialContext")
DeepSpeedTrialController = refused_class(f"{_PKG}.DeepSpeedTrialController")
ModelParallelUnit = refused_class(f"{_PKG}.ModelParallelUnit")
Trainer = refused_class(f"{_PKG}.Trainer")
init = refused_function(f"{_PKG}.init")
make_data_parallel_mpu = refused_function(f"{_PKG}.make_data_parallel_mpu")
make_deepspeed_mpu = refused_function(f"{_PKG}.make_deepspeed_mpu")


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

#: any other public name of Determined's module refuses too
__getattr__ = module_getattr(_PKG)
