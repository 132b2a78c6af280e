"""Experiment and cluster configuration: parsing, validation, overrides.

Owns: the public API re-exported here. The typed values live in
``dethpc.config.model``; the parsers in ``experiment``, ``searcher``,
``hparams``, ``cluster``, ``overrides`` and ``stored`` (a stored config read back).
Must not: hold logic itself (it only re-exports).
"""

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
