"""Experiment and cluster configuration: parsing, validation, overrides.

Owns: the public API re-exported here. The typed values live in
``dethpc.config.model``; the parsers in ``experiment``, ``searcher``,
``hparams``, ``cluster``, ``overrides`` and ``stored`` (a stored config read back);
where the cluster config file is looked for in ``locate``.
Each name is imported on first use (PEP 562 ``__getattr__``): importing one submodule
(``dethpc.config.locate`` on the read commands' path, issue 47) does not import YAML
and every parser with it.
Must not: hold logic itself (it only re-exports).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from dethpc.config.cluster import (
        cluster_to_dict,
        default_cluster_config,
        find_cluster_config,
        load_cluster_config,
        parse_cluster_config,
    )
    from dethpc.config.experiment import (
        dump_config,
        load_experiment_config,
        parse_experiment_config,
    )
    from dethpc.config.hparams import flatten_hparams, grid_size
    from dethpc.config.model import ClusterConfig, ExperimentConfig, ResourcePool
    from dethpc.config.overrides import apply_overrides
    from dethpc.config.stored import parse_stored

#: each public name -> the submodule that defines it
_WHERE = {
    "cluster_to_dict": "cluster", "default_cluster_config": "cluster",
    "find_cluster_config": "cluster", "load_cluster_config": "cluster",
    "parse_cluster_config": "cluster",
    "dump_config": "experiment", "load_experiment_config": "experiment",
    "parse_experiment_config": "experiment",
    "flatten_hparams": "hparams", "grid_size": "hparams",
    "ClusterConfig": "model", "ExperimentConfig": "model", "ResourcePool": "model",
    "apply_overrides": "overrides",
    "parse_stored": "stored",
}

__all__ = [
    "ClusterConfig",
    "ExperimentConfig",
    "ResourcePool",
    "apply_overrides",
    "cluster_to_dict",
    "default_cluster_config",
    "dump_config",
    "find_cluster_config",
    "flatten_hparams",
    "grid_size",
    "load_cluster_config",
    "load_experiment_config",
    "parse_cluster_config",
    "parse_experiment_config",
    "parse_stored",
]


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
