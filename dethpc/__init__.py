"""dethpc: Determined-style deep-learning experiments on Slurm clusters.

Owns: the version string and Determined's top-level names, so that training code
written for Determined runs with one changed line, ``import dethpc as det``:
``det.core``, ``det.pytorch``, ``det.get_cluster_info``, ``det.ClusterInfo``,
``det.TrialInfo`` and ``det.LOG_FORMAT`` (docs/core-api.md). They are loaded lazily
(PEP 562): importing ``dethpc`` alone, as the daemon and the CLI do, loads none of them.
Everything else lives in the layered sub-packages of docs/architecture.md.
Must not: be imported by its own sub-packages (the version is
``dethpc.common.version``), or import anything eagerly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dethpc import core, pytorch
    from dethpc.core import LOG_FORMAT, ClusterInfo, TrialInfo, get_cluster_info

from dethpc.common.version import __version__

_SUBMODULES = ("core", "pytorch")
_FROM_CORE = ("LOG_FORMAT", "ClusterInfo", "TrialInfo", "get_cluster_info")

__all__ = ["LOG_FORMAT", "ClusterInfo", "TrialInfo", "__version__", "core",
           "get_cluster_info", "pytorch"]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"dethpc.{name}")
    if name in _FROM_CORE:
        return getattr(importlib.import_module("dethpc.core"), name)
    raise AttributeError(f"module 'dethpc' has no attribute {name!r}")
