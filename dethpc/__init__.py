"""dethpc: Determined-style deep-learning experiments on Slurm clusters.

Owns: the version string and Determined's top-level names, so that training code
written for Determined runs with one changed line, ``import dethpc as det``:
``det.core``, ``det.pytorch``, ``det.get_cluster_info``, ``det.ClusterInfo``,
``det.TrialInfo``, ``det.RendezvousInfo``, ``det.ResourcesInfo``, ``det.InvalidHP``,
``det.import_from_path``, ``det.LOG_FORMAT``, ``det.util`` and ``det.errors``
(``dethpc.common.util`` and ``dethpc.common.errors``), and stand-ins for the names dethpc
refuses (Determined's legacy harness classes: using one says why; docs/core-api.md has
the whole table). They are loaded lazily (PEP 562): importing ``dethpc`` alone, as the
daemon and the CLI do, loads none of them.
Everything else lives in the layered sub-packages of docs/architecture.md.
Must not: be imported by its own sub-packages (the version is
``dethpc.common.version``), or import anything eagerly.
"""

from __future__ import annotations

import importlib

from dethpc.common.version import __version__

#: ``typing.TYPE_CHECKING`` without importing typing (``dethpc --version`` imports this
#: package and little else; typing and what it pulls in were most of its imports)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from dethpc import core, pytorch
    from dethpc.common import errors, util
    from dethpc.core import (
        LOG_FORMAT,
        ClusterInfo,
        InvalidHP,
        RendezvousInfo,
        ResourcesInfo,
        TrialInfo,
        get_cluster_info,
        import_from_path,
    )

_SUBMODULES = {"core": "dethpc.core", "pytorch": "dethpc.pytorch",
               "util": "dethpc.common.util", "errors": "dethpc.common.errors"}
_FROM_CORE = ("LOG_FORMAT", "ClusterInfo", "TrialInfo", "RendezvousInfo", "ResourcesInfo",
              "InvalidHP", "get_cluster_info", "import_from_path")
#: Determined's top-level names that dethpc refuses (classes of its legacy harness)
_REFUSED = ("EnvContext", "ExperimentConfig", "LegacyTrial", "TrialContext", "TrialController")
_STUBS: dict[str, Any] = {}

__all__ = ["LOG_FORMAT", "ClusterInfo", "InvalidHP", "RendezvousInfo", "ResourcesInfo",
           "TrialInfo", "__version__", "core", "errors", "get_cluster_info",
           "import_from_path", "pytorch", "util"]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(_SUBMODULES[name])
    if name in _FROM_CORE:
        return getattr(importlib.import_module("dethpc.core"), name)
    if name in _REFUSED:
        if name not in _STUBS:
            from dethpc.core._refused import refused_class

            _STUBS[name] = refused_class(f"determined.{name}")
        return _STUBS[name]
    raise AttributeError(f"module 'dethpc' has no attribute {name!r}")
