"""Build the searcher an experiment config asks for.

Owns: ``make_searcher``, which asks ``dethpc.config.searcher_registry`` for the spec
named by ``searcher.name`` and calls its factory.
Must not: do I/O or keep state; list searchers (the registry does); restoring a
snapshot is the caller's job (``make_searcher(...).restore(saved)``).
"""

from __future__ import annotations

from dethpc.common.errors import ConfigError, FieldError
from dethpc.config import searcher_registry as registry
from dethpc.config.model import HParamTree, SearcherConfig
from dethpc.searchers.base import Searcher


def make_searcher(config: SearcherConfig, hparams: HParamTree, seed: int) -> Searcher:
    """A fresh searcher for ``config`` over ``hparams`` whose RNG is seeded with ``seed``
    (the experiment's ``reproducibility.experiment_seed``)."""
    spec = registry.find(config.name)
    if spec is None:
        raise ConfigError(
            [FieldError("searcher.name", f"unknown searcher {config.name!r}; "
                                         f"allowed: {', '.join(registry.names())}")],
            source="experiment config",
        )
    searcher: Searcher = spec.factory(config, hparams, seed)
    return searcher
